// Checkpoints are verified before they are restored: every kind of damage (a truncated, changed
// or missing file, a tensor of another shape, optimizer moments of another step) is rejected with
// one line naming the file, and the model and optimizer are left exactly as they were.
#include <ATen/ATen.h>
#include <torch/serialize.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "catch.h"
#include "mxablate/data/sha256.h"
#include "mxablate/trainer/checkpoint/checkpoint.h"
#include "mxablate/trainer/model/model.h"
#include "mxablate/trainer/parallel/step_engine.h"
#include "test_support.h"
#include "trainer_state_at.h"

using namespace mxablate;
using namespace mxablate::trainer;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int64_t kBatch = 2, kSeq = 32;

ModelOptions options(int64_t vocab, uint64_t seed) {
  ModelOptions o;
  o.shape = *find_model_preset("smoke");
  o.vocab_size = vocab;
  o.init_seed = seed;
  return o;
}

struct Trained {
  LlamaModel model{nullptr};
  std::unique_ptr<StepEngine> optimizer;  // the replicated step of one rank
};

// One AdamW step on a batch drawn from `gen`.
void step_on(Trained& t, int64_t vocab, at::Generator& gen) {
  const at::Tensor tokens = at::randint(0, vocab, {kBatch, kSeq + 1}, gen);
  t.optimizer->zero_gradients();
  t.optimizer->begin_backward(true);
  t.model->loss(tokens.narrow(1, 0, kSeq), tokens.narrow(1, 1, kSeq)).backward();
  t.optimizer->end_backward(true);
  t.optimizer->step(contract::TrainConfig{}.lr);
}

Trained train(int64_t vocab, uint64_t seed, int steps) {
  Trained t;
  t.model = LlamaModel(options(vocab, seed));
  t.optimizer = make_step_engine(contract::RunConfig{}, *t.model, nullptr, {});
  at::Generator gen = at::detail::createCPUGenerator(7);
  for (int i = 0; i < steps; ++i) step_on(t, vocab, gen);
  return t;
}

const json kRunConfig = {{"run_id", "run-1"}, {"model", "smoke"}, {"train", {{"lr", 0.001}}}};

TrainerState state_at(int64_t step) { return test::trainer_state_at(step, kBatch * kSeq, kBatch); }

CheckpointExpectation expectation() {
  CheckpointExpectation e;
  e.run_id = "run-1";
  e.trajectory_config = trajectory_config(kRunConfig);
  e.total_steps = 10;
  e.tokens_per_step = kBatch * kSeq;
  e.samples_per_step = kBatch;
  return e;
}

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("mxablate_ckpt_test_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// A copy of the intact checkpoint, in its own run directory, to damage.
fs::path copy_of(const fs::path& checkpoint, const std::string& name) {
  const fs::path dir = fresh_dir(name) / "checkpoints" / checkpoint.filename();
  fs::create_directories(dir.parent_path());
  fs::copy(checkpoint, dir, fs::copy_options::recursive);
  return dir;
}

// Lists `file` in state.json with its current size and checksum, and seals the state again:
// what a checkpoint whose files are consistent but wrong looks like.
void relist(const fs::path& checkpoint, const std::string& file) {
  std::ifstream in(checkpoint / "state.json");
  json j = json::parse(in);
  j["files"][file] = {{"bytes", static_cast<int64_t>(fs::file_size(checkpoint / file))},
                      {"sha256", data::sha256_file((checkpoint / file).string())}};
  seal_checkpoint_state(j);
  std::ofstream(checkpoint / "state.json", std::ios::trunc) << j.dump(2);
}

std::string load_error(const fs::path& checkpoint, Trained& into) {
  try {
    load_checkpoint(checkpoint.string(), *into.model, *into.optimizer, expectation());
  } catch (const CheckpointRejected& e) {
    const std::string what = e.what();
    CHECK(what.find('\n') == std::string::npos);
    return what;
  }
  return "loaded";
}

bool same_parameters(torch::nn::Module& a, torch::nn::Module& b) {
  const auto pa = a.parameters(), pb = b.parameters();
  if (pa.size() != pb.size()) return false;
  for (size_t i = 0; i < pa.size(); ++i)
    if (!pa[i].sizes().equals(pb[i].sizes()) || !at::equal(pa[i], pb[i])) return false;
  return true;
}

}  // namespace

TEST_CASE("A checkpoint restores model and optimizer exactly", "[trainer][checkpoint]") {
  Trained saved = train(96, 1, 2);
  const fs::path run = fresh_dir("exact");
  const fs::path ckpt = save_checkpoint(run.string(), *saved.model, *saved.optimizer, state_at(2), kRunConfig, true);
  CHECK(ckpt.filename() == "step-00000002");
  Trained fresh = train(96, 5, 0);
  REQUIRE_FALSE(same_parameters(*fresh.model, *saved.model));
  const TrainerState s = load_checkpoint(ckpt.string(), *fresh.model, *fresh.optimizer, expectation());
  CHECK(s.step == 2);
  CHECK(s.tokens == 2 * kBatch * kSeq);
  CHECK(same_parameters(*fresh.model, *saved.model));
  // One more identical step on both gives identical parameters: the moments came back too.
  for (Trained* t : {&saved, &fresh}) {
    at::Generator gen = at::detail::createCPUGenerator(99);
    step_on(*t, 96, gen);
  }
  CHECK(same_parameters(*fresh.model, *saved.model));
}

std::string bytes_of(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// The checkpoint's model.pt is written from host copies of the tensors (docs/design.md §4,
// "Checkpoints and exact resume"): it must be the file Module::save writes of the tensors
// themselves, with parameters that share a storage (a sharded step's flat buffers) too.
TEST_CASE("A checkpoint's model.pt is byte for byte what Module::save writes", "[trainer][checkpoint]") {
  Trained saved = train(96, 1, 2);
  SECTION("each parameter its own storage") {}
  SECTION("parameters as views into one flat buffer, as a sharded step lays them out") {
    torch::NoGradGuard no_grad;
    int64_t total = 0;
    for (const at::Tensor& p : saved.model->parameters()) total += p.numel();
    const at::Tensor flat = at::zeros({total + 3});  // padded, as a bucket is
    int64_t at = 0;
    for (at::Tensor& p : saved.model->parameters()) {
      at::Tensor view = flat.narrow(0, at, p.numel());
      view.copy_(p.reshape({-1}));
      p.set_data(view.view(p.sizes()));
      at += p.numel();
    }
  }
  const fs::path run = fresh_dir("model_bytes");
  const fs::path ckpt = save_checkpoint(run.string(), *saved.model, *saved.optimizer, state_at(2), kRunConfig, true);
  torch::serialize::OutputArchive direct;
  saved.model->save(direct);
  direct.save_to((run / "model.pt").string());
  const std::string expected = bytes_of(run / "model.pt");
  REQUIRE(expected.size() > 1000);
  CHECK(bytes_of(ckpt / "model.pt") == expected);
  // A second checkpoint into the same directory name reads the same tensors again.
  const fs::path again = save_checkpoint(run.string(), *saved.model, *saved.optimizer, state_at(2), kRunConfig, true);
  CHECK(bytes_of(again / "model.pt") == expected);
}

TEST_CASE("A damaged checkpoint is rejected with one line and changes nothing", "[trainer][checkpoint]") {
  Trained saved = train(96, 1, 2);
  const fs::path run = fresh_dir("damaged");
  const fs::path ckpt = save_checkpoint(run.string(), *saved.model, *saved.optimizer, state_at(2), kRunConfig, true);
  const fs::path run1 = fresh_dir("step1");
  Trained one_step = train(96, 1, 1);
  const fs::path ckpt1 = save_checkpoint(run1.string(), *one_step.model, *one_step.optimizer, state_at(1), kRunConfig, true);

  Trained fresh = train(96, 5, 0);
  Trained untouched = train(96, 5, 0);
  const auto check_unchanged = [&] {
    CHECK(same_parameters(*fresh.model, *untouched.model));
    // And the optimizer: one identical step on both stays identical only if no moments came in.
    for (Trained* t : {&fresh, &untouched}) {
      at::Generator gen = at::detail::createCPUGenerator(99);
      step_on(*t, 96, gen);
    }
    CHECK(same_parameters(*fresh.model, *untouched.model));
  };

  SECTION("truncated model.pt") {
    const fs::path c = copy_of(ckpt, "truncated");
    fs::resize_file(c / "model.pt", fs::file_size(c / "model.pt") / 2);
    CHECK_THAT(load_error(c, fresh), has_text("model.pt: ") && has_text("bytes, state.json records") &&
                                         has_text("(truncated or replaced)"));
  }
  SECTION("a flipped byte in optimizer.pt") {
    const fs::path c = copy_of(ckpt, "flipped");
    std::FILE* f = std::fopen((c / "optimizer.pt").string().c_str(), "r+b");
    REQUIRE(f);
    std::fseek(f, static_cast<long>(fs::file_size(c / "optimizer.pt") / 2), SEEK_SET);
    const int byte = std::fgetc(f);
    std::fseek(f, -1, SEEK_CUR);
    std::fputc(byte ^ 0x10, f);
    std::fclose(f);
    CHECK(load_error(c, fresh) == "optimizer.pt: checksum does not match state.json (the file is damaged)");
  }
  SECTION("a missing rng.pt") {
    const fs::path c = copy_of(ckpt, "missing");
    fs::remove(c / "rng.pt");
    CHECK(load_error(c, fresh) == "rng.pt: missing");
  }
  SECTION("a missing state.json") {
    const fs::path c = copy_of(ckpt, "nostate");
    fs::remove(c / "state.json");
    CHECK(load_error(c, fresh) == "state.json: missing");
  }
  SECTION("a model.pt of another shape, listed with its own checksum") {
    Trained other = train(80, 1, 2);
    const fs::path other_run = fresh_dir("other_vocab");
    const fs::path other_ckpt =
        save_checkpoint(other_run.string(), *other.model, *other.optimizer, state_at(2), kRunConfig, true);
    const fs::path c = copy_of(ckpt, "shapes");
    fs::copy_file(other_ckpt / "model.pt", c / "model.pt", fs::copy_options::overwrite_existing);
    relist(c, "model.pt");
    CHECK_THAT(load_error(c, fresh), has_text("model.pt: ") && has_text("[80, 64]") &&
                                         has_text("the model's is [96, 64]"));
  }
  SECTION("a model.pt that is not an archive, listed with its own checksum") {
    const fs::path c = copy_of(ckpt, "garbage");
    std::ofstream(c / "model.pt", std::ios::trunc) << "not a zip archive at all";
    relist(c, "model.pt");
    const std::string why = load_error(c, fresh);
    CHECK(why.rfind("model.pt: ", 0) == 0);  // LibTorch's message, its first line only
  }
  SECTION("optimizer moments of another step") {
    const fs::path c = copy_of(ckpt, "moments");
    fs::copy_file(ckpt1 / "optimizer.pt", c / "optimizer.pt", fs::copy_options::overwrite_existing);
    relist(c, "optimizer.pt");
    CHECK_THAT(load_error(c, fresh), has_text("optimizer.pt: the moments of parameter 0 have taken 1 steps, "
                                              "the checkpoint says 2"));
  }
  SECTION("a negative step") {
    const fs::path c = copy_of(ckpt, "negative");
    std::ifstream in(c / "state.json");
    json j = json::parse(in);
    j["step"] = -2;
    seal_checkpoint_state(j);
    std::ofstream(c / "state.json", std::ios::trunc) << j.dump();
    CHECK(load_error(c, fresh) == "state.json: step: -2 is negative");
  }
  check_unchanged();
}

TEST_CASE("Checkpoints are listed newest first, a rejected one is set aside", "[trainer][checkpoint]") {
  Trained saved = train(96, 1, 1);
  const fs::path run = fresh_dir("listing");
  for (int64_t step : {1, 3, 2}) save_checkpoint(run.string(), *saved.model, *saved.optimizer, state_at(step), kRunConfig, true);
  fs::create_directories(run / "checkpoints" / "step-00000009.tmp");  // an interrupted write
  auto listed = checkpoints_newest_first(run.string());
  REQUIRE(listed.size() == 3);
  CHECK(fs::path(listed[0]).filename() == "step-00000003");
  CHECK(fs::path(listed[2]).filename() == "step-00000001");
  const std::string moved = set_aside_checkpoint(listed[0]);
  CHECK(fs::path(moved).filename() == "step-00000003.rejected");
  CHECK(fs::exists(moved));
  listed = checkpoints_newest_first(run.string());
  REQUIRE(listed.size() == 2);
  CHECK(fs::path(listed[0]).filename() == "step-00000002");
  prune_checkpoints(run.string(), 1);
  CHECK(checkpoints_newest_first(run.string()).size() == 1);
  CHECK(fs::exists(moved));  // kept for inspection
  CHECK_FALSE(fs::exists(run / "checkpoints" / "step-00000009.tmp"));
}
