// BF16 working copies in process (docs/design.md §4, "What the ranks replicate"): the sharded step
// engine of one rank (Gloo on the CPU, NCCL on CUDA, so that a machine with one GPU runs its CUDA
// path: the sink's widened dW, the byte all-gather, the masters gathered into pinned memory for
// model.pt) keeps the block linears as BF16 working copies, trains as the replicated step bit for
// bit and writes the float32 masters into model.pt. Resuming from them, and runs on several
// ranks, are sharded_dp_test.cpp's (a checkpoint of one rank's shard is no valid checkpoint).
#include <ATen/ATen.h>
#include <torch/cuda.h>
#include <torch/serialize.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "catch.h"
#include "mxablate/trainer/checkpoint/checkpoint.h"
#include "mxablate/trainer/model/model.h"
#include "mxablate/trainer/parallel/data_parallel.h"
#include "mxablate/trainer/parallel/step_engine.h"
#include "free_port.h"
#include "test_support.h"
#include "trainer_state_at.h"

using namespace mxablate;
using namespace mxablate::trainer;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int64_t kVocab = 256, kBatch = 2, kSeq = 32;

// A group of one rank on `device`; null where this build lacks its backend (the caller skips).
std::unique_ptr<DataParallel> group_of_one(const at::Device& device) {
  if (!missing_backend(device.is_cuda(), 1).empty()) return nullptr;
  RankInfo rank;
  rank.store_host = "127.0.0.1";
  rank.store_port = test::free_port();
  rank.hosts_store = true;
  return std::make_unique<DataParallel>(rank, device);
}

struct Trained {
  LlamaModel model{nullptr};
  std::unique_ptr<StepEngine> engine;
};

// The smoke model on `device`, every linear plain BF16 (the default plans): its linears are the
// weights a sharded run keeps as BF16 working copies.
Trained make(const at::Device& device, uint64_t seed, DataParallel* group) {
  ModelOptions o;
  o.shape = *find_model_preset("smoke");
  o.vocab_size = kVocab;
  o.device = device;
  o.init_seed = seed;
  Trained t;
  t.model = LlamaModel(o);
  contract::RunConfig c;
  std::vector<at::Tensor> bf16;
  if (group) {
    c.parallel.shard = contract::ShardLevel::kOptimizer;
    for (const MXLinear& linear : t.model->linears()) bf16.push_back(linear->weight);
  }
  t.engine = make_step_engine(c, *t.model, group, bf16);
  return t;
}

// One step of two micro-batches drawn from `gen`; the sum of their losses. The LM head and the
// loss take 16 of a micro-batch's 64 tokens at a time (chunked_loss.h), so that the LM head's
// gradient of a micro-batch is the sum of 4 chunks', added to the first micro-batch's. The norm
// is measured, not applied: the two engines sum it in another order (docs/design.md §4,
// "Comparing runs that sum in another order").
double step_on(Trained& t, at::Generator& gen, const at::Device& device) {
  double total = 0;
  t.engine->zero_gradients();
  for (int micro = 0; micro < 2; ++micro) {
    const at::Tensor tokens = at::randint(0, kVocab, {kBatch, kSeq + 1}, gen).to(device);
    t.engine->begin_backward(micro == 1);
    const at::Tensor loss =
        t.model->loss(tokens.narrow(1, 0, kSeq), tokens.narrow(1, 1, kSeq), kBatch * kSeq / 4);
    loss.backward();
    t.engine->end_backward(micro == 1);
    total += loss.item<double>();
  }
  t.engine->clip_gradients(std::numeric_limits<double>::infinity());
  t.engine->step(1e-3);
  return total;
}

const json kRunConfig = {{"run_id", "run-1"}, {"model", "smoke"}, {"train", {{"lr", 0.001}}}};

void check_on(const at::Device& device) {
  const std::unique_ptr<DataParallel> group = group_of_one(device);
  if (!group) MXABLATE_SKIP(missing_backend(device.is_cuda(), 1));
  Trained replicated = make(device, 5, nullptr);
  Trained sharded = make(device, 5, group.get());
  const std::vector<at::Tensor> reference = replicated.model->parameters();
  const std::vector<at::Tensor> copies = sharded.model->parameters();
  int64_t in_bf16 = 0;
  for (size_t i = 0; i < copies.size(); ++i) {
    if (copies[i].scalar_type() != at::kBFloat16) continue;
    in_bf16 += copies[i].numel();
    CHECK(sharded.engine->keeps_master(copies[i]));
  }
  // The linears: all but the embedding and the norms. On one rank a BF16 copy and its whole
  // master take 6 bytes where the replicated step's weight takes 4.
  REQUIRE(in_bf16 > 0);
  CHECK(sharded.engine->weight_bytes() == replicated.engine->weight_bytes() + 2 * in_bf16);

  at::Generator a = at::detail::createCPUGenerator(11), b = at::detail::createCPUGenerator(11);
  for (int s = 0; s < 3; ++s) {
    INFO("step " << s + 1);
    CHECK(step_on(sharded, b, device) == step_on(replicated, a, device));
  }
  // The working copies are the replicated weights rounded, the rest the same bits.
  for (size_t i = 0; i < copies.size(); ++i) {
    INFO("parameter " << i);
    CHECK(at::equal(copies[i], reference[i].to(copies[i].scalar_type())));
  }

  // model.pt holds the float32 masters: the replicated run's weights, bit for bit.
  const fs::path run = fs::temp_directory_path() / ("mxablate_working_copies_" + std::string(device.is_cuda() ? "cuda" : "cpu"));
  fs::remove_all(run);
  const std::string ckpt = save_checkpoint(run.string(), *sharded.model, *sharded.engine, test::trainer_state_at(3, kBatch * kSeq, kBatch), kRunConfig, true);
  {
    Trained loaded = make(device, 9, nullptr);  // float32 parameters, of another initialization
    torch::serialize::InputArchive archive;
    archive.load_from(ckpt + "/model.pt", device);
    loaded.model->load(archive);
    const std::vector<at::Tensor> masters = loaded.model->parameters();
    REQUIRE(masters.size() == reference.size());
    for (size_t i = 0; i < masters.size(); ++i) {
      INFO("parameter " << i << " in model.pt");
      CHECK(masters[i].scalar_type() == at::kFloat);
      CHECK(at::equal(masters[i], reference[i]));
    }
  }
  group->close();
}

}  // namespace

TEST_CASE("A sharded step keeps BF16 working copies on the CPU, trains as the replicated step and checkpoints float32 masters",
          "[train][parallel][shard]") {
  check_on(at::kCPU);
}

TEST_CASE("A sharded step keeps BF16 working copies on CUDA, trains as the replicated step and checkpoints float32 masters",
          "[train][parallel][shard][gpu]") {
  if (!torch::cuda::is_available()) MXABLATE_SKIP("no CUDA device: the NCCL path of the working copies cannot run here");
  check_on(at::Device(at::kCUDA, 0));
}
