// mxablate-train on data imported from a Megatron-LM indexed dataset: the trainer takes the
// vocabulary from the import's manifest and learns the (easily learnable) token stream.
#include <cmath>
#include <sstream>

#include "catch.h"
#include "megatron_writer.h"
#include "mxablate/data/megatron_import.h"
#include "process_util.h"
#include "run_test_support.h"

using namespace mxablate;
using namespace mxablate::test;

TEST_CASE("mxablate-train trains the smoke model on an imported Megatron dataset", "[train]") {
  TempDir dir("mxablate_megatron_train");
  // int32 ids (as Megatron writes for large vocabularies): counting sequences mod 256 from a
  // random start, one or two sequences per document.
  const auto docs = counting_documents(200, 150, 256, 12345, [](int d) { return 1 + d % 2; });
  write_megatron(dir / "seq", megatron_parts(docs, 4));
  data::MegatronImportOptions o;
  o.prefixes = {dir / "seq"};
  o.out_dir = dir / "data";
  o.vocab_size = 256;
  o.val_fraction = 0.1;
  std::ostringstream log;
  data::import_megatron(o, log);

  contract::RunConfig c;
  c.model = "smoke";
  c.data.dataset = o.out_dir;
  c.data.seq_len = 64;
  c.train.global_batch_tokens = 1024;
  c.train.max_tokens = 1024 * 30;
  c.train.lr = 3e-3;
  c.train.warmup_tokens = 1024 * 5;
  c.eval.every_tokens = 1024 * 15;
  c.eval.tokens = 2048;
  c.checkpoint.every_steps = 0;
  c.telemetry.train_every_steps = 5;
  c.telemetry.quant_every_steps = 0;
  c.threads = 1;
  const std::string run = fresh_run_dir("megatron_import");
  const TrainResult r = run_train(run, &c);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto events = effective_events(run);
  REQUIRE(events.back()["kind"] == "run_end");
  CHECK(events.back()["status"] == "budget_exhausted");
  const auto evals = events_of_kind(events, "eval");
  REQUIRE(evals.size() == 3);
  const double first = evals.front()["val_loss"].get<double>();
  const double last = evals.back()["val_loss"].get<double>();
  CHECK(first == Approx(std::log(256.0)).margin(0.3));  // the model's vocabulary is the import's
  CHECK(last < 0.7 * first);
}
