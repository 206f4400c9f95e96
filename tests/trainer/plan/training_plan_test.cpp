// Batch geometry, the warmup + cosine schedule and the evaluation points.
#include <cmath>

#include "catch.h"
#include "mxablate/trainer/plan/training_plan.h"

using namespace mxablate;
using namespace mxablate::trainer;

TEST_CASE("Batch geometry and step counts", "[trainer][schedule]") {
  contract::RunConfig c;
  c.data.seq_len = 64;
  c.train.global_batch_tokens = 4096;
  c.train.micro_batch_tokens = 1024;
  c.train.max_tokens = 1e6;
  c.train.warmup_tokens = 40000;
  const TrainingPlan p = make_training_plan(c);
  CHECK(p.micro_batches_per_step == 4);
  CHECK(p.sequences_per_micro_batch == 16);
  CHECK(p.total_steps == 245);  // ceil(1e6 / 4096)
  CHECK(p.warmup_steps == 10);  // ceil(40000 / 4096)
  c.train.micro_batch_tokens = 0;
  CHECK(make_training_plan(c).micro_batches_per_step == 1);
  c.eval.tokens = 1000;
  CHECK(make_training_plan(c).eval_sequences == 16);  // ceil(1000 / 64)
}

TEST_CASE("Warmup is linear, then a cosine decays to lr * min_lr_ratio", "[trainer][schedule]") {
  contract::RunConfig c;
  c.data.seq_len = 16;
  c.train.global_batch_tokens = 160;
  c.train.max_tokens = 160 * 111;  // 111 steps: 10 of warmup, 101 of decay
  c.train.warmup_tokens = 160 * 10;
  c.train.lr = 1e-3;
  c.train.min_lr_ratio = 0.1;
  const TrainingPlan p = make_training_plan(c);
  CHECK(p.lr_at(0) == Approx(1e-4));
  CHECK(p.lr_at(4) == Approx(5e-4));
  CHECK(p.lr_at(9) == Approx(1e-3));
  CHECK(p.lr_at(10) == Approx(1e-3));                           // decay starts at the peak
  CHECK(p.lr_at(110) == Approx(1e-4));                          // and ends at the floor
  CHECK(p.lr_at(60) == Approx(0.55e-3));                        // halfway: the mean
  CHECK(p.lr_at(35) == Approx(1e-4 + 9e-4 * 0.5 * (1 + std::cos(M_PI / 4))));
  for (int64_t s = 10; s < 110; ++s) CHECK(p.lr_at(s + 1) < p.lr_at(s));
  c.train.warmup_tokens = 0;
  CHECK(make_training_plan(c).lr_at(0) == Approx(1e-3));
}

TEST_CASE("Evaluation is due whenever a multiple of every_tokens is crossed", "[trainer][schedule]") {
  contract::RunConfig c;
  c.eval.every_tokens = 1000;
  const TrainingPlan p = make_training_plan(c);
  CHECK_FALSE(p.eval_due(0, 999));
  CHECK(p.eval_due(999, 1000));
  CHECK(p.eval_due(512, 1536));
  CHECK_FALSE(p.eval_due(1000, 1999));
  CHECK(p.eval_due(1999, 4500));  // several crossed at once: one evaluation
}
