// Training and validation batches: targets are the inputs shifted by one token, the training
// order is the sampler's (so a data position resumes exactly), and validation is a fixed set.
#include <ATen/ATen.h>

#include <unistd.h>

#include <filesystem>
#include <numeric>

#include "catch.h"
#include "mxablate/data/manifest.h"
#include "mxablate/data/token_shards.h"
#include "mxablate/trainer/run/batches.h"

using namespace mxablate;
using namespace mxablate::trainer;
namespace fs = std::filesystem;

namespace {

// A data directory whose token i is i % 997 (train) or (i * 3) % 997 (validation), in two train
// shards, with a manifest: enough to see exactly which tokens a batch holds. One per process:
// CTest runs this file's test cases as concurrent processes.
std::string make_dataset() {
  const fs::path dir = fs::temp_directory_path() / ("mxablate_batches_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  data::Manifest m;
  m.tokenizer.file = "none";
  m.tokenizer.vocab_size = 997;
  const auto write = [&](const std::string& file, int64_t first, int64_t count, int mult) {
    std::vector<int32_t> t(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) t[static_cast<size_t>(i)] = static_cast<int32_t>(((first + i) * mult) % 997);
    data::TokenShardWriter w((dir / file).string(), 997);
    w.append(t);
    w.close();
    return data::ShardInfo{file, count, ""};
  };
  m.train.shards = {write("train-0.bin", 0, 3000, 1), write("train-1.bin", 3000, 2001, 1)};
  m.train.tokens = 5001;
  m.validation.shards = {write("val-0.bin", 0, 1000, 3)};
  m.validation.tokens = 1000;
  data::write_manifest(dir.string(), m);
  return dir.string();
}

const std::string& dataset() {
  static const struct Scratch {
    std::string dir = make_dataset();
    ~Scratch() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } scratch;
  return scratch.dir;
}

}  // namespace

TEST_CASE("Training batches follow the sampler and shift targets by one", "[trainer][batches]") {
  const data::TokenDataset ds = data::open_dataset(dataset());
  const TrainBatches batches(ds, 50, 9);
  CHECK(batches.windows_per_epoch() == 100);  // (5001 - 1) / 50
  const data::SequenceSampler sampler(5001, 50, 9);
  const TokenBatch b = batches.get(37, 4, at::kCPU);
  REQUIRE(b.inputs.sizes() == at::IntArrayRef({4, 50}));
  for (int64_t i = 0; i < 4; ++i) {
    const int64_t start = sampler.window_start(37 + i);
    for (int64_t j = 0; j < 50; ++j) {
      CHECK(b.inputs[i][j].item<int64_t>() == (start + j) % 997);
      CHECK(b.targets[i][j].item<int64_t>() == (start + j + 1) % 997);
    }
  }
  // The same samples asked again, or as part of a larger batch, are the same tokens.
  const TokenBatch wide = batches.get(36, 6, at::kCPU);
  CHECK(at::equal(wide.inputs.narrow(0, 1, 4), b.inputs));
  CHECK(b.inputs.scalar_type() == at::kLong);
}

TEST_CASE("The validation set is the first windows, in order, in fixed batches", "[trainer][batches]") {
  const data::TokenDataset ds = data::open_dataset(dataset());
  const auto val = validation_batches(ds, 50, 7, 3, at::kCPU);
  REQUIRE(val.size() == 3);  // 3 + 3 + 1 sequences
  CHECK(val[2].inputs.size(0) == 1);
  CHECK(val[1].inputs[0][0].item<int64_t>() == (150 * 3) % 997);  // window 3 starts at token 150
  CHECK(val[2].targets[0][49].item<int64_t>() == (350 * 3) % 997);
  CHECK_THROWS_AS(validation_batches(ds, 50, 20, 4, at::kCPU), std::invalid_argument);  // 19 windows
}
