// Sharded data parallelism on the CPU (Gloo), end to end through mxablate-train: ZeRO-1/2 runs
// against the replicated run, a rank killed mid-run, a damaged shard, and a resume on another
// number of ranks (docs/design.md §4, "Sharded data parallelism"; docs/trainer.md).
//
// How the sharded runs are compared with the replicated run (run_comparison.h says why no
// tolerance over a whole curve holds on every CPU). A sharded step computes exactly the
// replicated step's per-element AdamW update; what can differ is the order of two sums: the
// gradients (ZeRO-2 sums each micro-batch over the ranks, then over the micro-batches) and the
// global norm (each rank's float64 sum of its pieces' float32 norms, against LibTorch's norm of
// per-parameter norms). So:
//   - bit for bit, on 2 and 4 ranks of one micro-batch each, both levels, against the replicated
//     run on as many ranks: every gradient is the same Gloo all-reduce of the same terms (the
//     smoke model's one bucket, 131,392 floats, needs no padding for 4 ranks), and clipping is
//     off, since a clip factor from the other norm could differ in its last bit;
//   - one update apart (check_one_update_apart) where the sums or the clip factor do differ:
//     clipping on, and ZeRO-2 with two micro-batches per rank; and after a resume on another
//     number of ranks.
// Making the sharded sums the replicated ones in every case would take a fixed-order reduction
// (an all-to-all and a local sum in place of NCCL's reduce-scatter, a norm reproducible across
// layouts) on the GPU path, which must not slow down for a test.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "catch.h"
#include "checkpoint_files.h"
#include "mxablate/data/sha256.h"
#include "mxablate/trainer/rules/checkpoint_state.h"
#include "run_comparison.h"
#include "run_test_support.h"

using namespace mxablate;
using namespace mxablate::test;
using mxablate::trainer::optimizer_shard_file;
using mxablate::trainer::seal_checkpoint_state;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// dp_config's run (every random stream, 12 steps, checkpoints every 5), three checkpoints kept.
contract::RunConfig sharded_config(int ranks, int64_t micro_batch_tokens, contract::ShardLevel shard) {
  contract::RunConfig c = dp_config(ranks, micro_batch_tokens);
  c.checkpoint.keep = 3;
  c.parallel.shard = shard;
  return c;
}

// sharded_config with clipping off (train.grad_clip 0): the norm is then reported, not applied.
contract::RunConfig unclipped(contract::RunConfig c) {
  c.train.grad_clip = 0;
  return c;
}

// A run whose comparison ends one step after its first: 3 steps (the last one evaluated).
contract::RunConfig three_steps(contract::RunConfig c) {
  c.train.max_tokens = c.train.global_batch_tokens * 3;
  c.checkpoint.every_steps = 0;
  return c;
}

// Runs `c` in a fresh run directory; "" where this build has no Gloo (the caller skips).
std::string sharded_run(const std::string& name, const contract::RunConfig& c) {
  const std::string dir = fresh_run_dir(name);
  const TrainResult r = run_train(dir, &c);
  if (lacks_gloo(r.output)) return "";
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return dir;
}

// A run of `c` whose rank `rank` is killed (kill -9) after step `step`: its directory, "" where
// this build has no Gloo (the caller skips).
std::string crashed_run(const std::string& name, const contract::RunConfig& c, int step, int rank) {
  const std::string dir = fresh_run_dir(name);
  const TrainResult crashed = run_train(
      dir, &c, "--debug-crash-at-step " + std::to_string(step) + " --debug-fault-rank " + std::to_string(rank));
  if (lacks_gloo(crashed.output)) return "";
  INFO(crashed.output);
  REQUIRE(crashed.exit_code == 137);
  return dir;
}

// sharded_config with the GEMMs of the block linears' weights plain BF16 (Fprop and Dgrad; Wgrad
// keeps MXFP4 with its random streams), except block 0's attention, whose Fprop stays MXFP4: a
// sharded run keeps BF16 working copies of the others beside sharded float32 masters
// (working_copies.h), and float32 weights for the rest (block 0's q, k, v, o, the norms, the
// embedding), so both kinds of bucket take part.
contract::RunConfig working_copies_config(int ranks, int64_t micro_batch_tokens, contract::ShardLevel shard) {
  contract::RunConfig c = sharded_config(ranks, micro_batch_tokens, shard);
  c.precision.fprop = c.precision.dgrad = contract::GemmPrecision::kBF16;
  contract::LayerOverride quantized{"blocks.0.attn.*", {}};
  quantized.patch.fprop = contract::GemmPrecision::kMXFP4;
  c.overrides.push_back(quantized);
  return c;
}

// Resumes the run in `dir` on `ranks` ranks (its config otherwise `c`): it must end well, having
// resumed from step 5's checkpoint. Its trajectory is the caller's to compare.
void resume_on(const std::string& dir, contract::RunConfig c, int ranks) {
  c.parallel.data = ranks;
  contract::write_run_config(dir + "/config.json", c);
  const TrainResult resumed = run_train(dir, nullptr, "--resume");
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  const auto resume = events_of_kind(effective_events(dir), "resume");
  REQUIRE(resume.size() == 1);
  CHECK(resume[0]["step"] == 5);
}

// The final weights of a run's newest checkpoint are not kept past the end; the last
// checkpoint's step-N files are what a test can compare: their optimizer shard names.
std::vector<std::string> files_of_checkpoint(const std::string& run_dir, const std::string& step) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(fs::path(run_dir) / "checkpoints" / step))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

TEST_CASE("Sharded optimizer and gradients on 2 and 4 ranks train as the replicated run, bit for bit",
          "[train][parallel][shard]") {
  using contract::ShardLevel;
  for (const int ranks : {2, 4}) {
    // One micro-batch per rank: each step's gradient is one all-reduce of the same terms.
    const int64_t micro = 512 / ranks;
    const std::string replicated = sharded_run("zero_replicated_" + std::to_string(ranks),
                                               unclipped(sharded_config(ranks, micro, ShardLevel::kNone)));
    if (replicated.empty()) MXABLATE_SKIP(kNoGloo);
    const Trajectory reference = trajectory_of(replicated);
    REQUIRE(reference.loss.size() == 12);
    const auto replicated_start = events_of_kind(effective_events(replicated), "run_start").front();
    REQUIRE(replicated_start["params"].get<int64_t>() % 4 == 0);  // no padding: the same all-reduce
    for (const ShardLevel shard : {ShardLevel::kOptimizer, ShardLevel::kGradients}) {  // a loop, not sections:
      // a section would repeat the replicated runs
      const std::string label = std::to_string(ranks) + "_" + std::string(contract::to_string(shard));
      INFO(ranks << " ranks, shard " << contract::to_string(shard));
      const std::string dir = sharded_run("zero_" + label, unclipped(sharded_config(ranks, micro, shard)));
      check_same_steps(trajectory_of(dir), reference);
      const auto events = effective_events(dir);
      const json& start = events.front();
      CHECK(start["ranks"] == ranks);
      CHECK(start["shard"] == contract::to_string(shard));
      // Each rank holds 1/ranks of the AdamW moments (give or take the buckets' padding).
      const double whole = replicated_start["optimizer_state_bytes_per_rank"].get<double>();
      CHECK(start["optimizer_state_bytes_per_rank"].get<double>() <= whole / ranks + 4096);
      // Its checkpoints hold one optimizer shard per rank.
      const auto files = files_of_checkpoint(dir, "step-00000010");
      CHECK(std::count_if(files.begin(), files.end(), [](const std::string& f) {
              return f.rfind("optimizer-shard-", 0) == 0;
            }) == ranks);
      CHECK(std::find(files.begin(), files.end(), "optimizer.pt") == files.end());
    }
  }
}

TEST_CASE("Sharded steps clip by the global norm and sum several micro-batches per rank as the replicated step",
          "[train][parallel][shard]") {
  using contract::ShardLevel;
  SECTION("clipping on: the same gradients, a clip factor from a norm summed in another order") {
    const std::string replicated =
        sharded_run("zero_clip_replicated", three_steps(sharded_config(2, 256, ShardLevel::kNone)));
    if (replicated.empty()) MXABLATE_SKIP(kNoGloo);
    const Trajectory reference = trajectory_of(replicated);
    REQUIRE(reference.grad_norm.front() > 1.0);  // so the first update is clipped
    for (const ShardLevel shard : {ShardLevel::kOptimizer, ShardLevel::kGradients}) {
      INFO("shard " << contract::to_string(shard));
      const std::string dir = sharded_run("zero_clip_" + std::string(contract::to_string(shard)),
                                          three_steps(sharded_config(2, 256, shard)));
      check_one_update_apart(trajectory_of(dir), reference, 1);
    }
  }
  SECTION("two micro-batches per rank: ZeRO-1 sums as the replicated step, ZeRO-2 in another order") {
    const auto config = [](ShardLevel shard) { return unclipped(three_steps(sharded_config(2, 128, shard))); };
    const std::string replicated = sharded_run("zero_micro_replicated", config(ShardLevel::kNone));
    if (replicated.empty()) MXABLATE_SKIP(kNoGloo);
    const Trajectory reference = trajectory_of(replicated);
    // ZeRO-1 accumulates the rank's micro-batches into its full gradient buffer, then sums the
    // two ranks' buffers: the replicated step's sums.
    check_same_steps(trajectory_of(sharded_run("zero_micro_optimizer", config(ShardLevel::kOptimizer))), reference);
    // ZeRO-2 sums each backward's gradients over the ranks, then the two sums: (a + c) + (b + d)
    // for the replicated (a + b) + (c + d).
    check_one_update_apart(trajectory_of(sharded_run("zero_micro_gradients", config(ShardLevel::kGradients))),
                           reference, 1);
  }
}

TEST_CASE("A sharded run whose rank dies resumes from its sharded checkpoint to the uninterrupted curve",
          "[train][parallel][shard]") {
  const contract::RunConfig c = sharded_config(2, 128, contract::ShardLevel::kGradients);
  const std::string reference = sharded_run("zero_uninterrupted", c);
  if (reference.empty()) MXABLATE_SKIP(kNoGloo);

  const std::string dir = crashed_run("zero_rank_dies", c, 7, 1);
  resume_on(dir, c, 2);
  // Every rank's moments and the weights came back exactly: the same steps, bit for bit.
  CHECK(trajectory_of(dir).loss == trajectory_of(reference).loss);
  CHECK(trajectory_of(dir).evals == trajectory_of(reference).evals);
}

TEST_CASE("A damaged optimizer shard sets its checkpoint aside and the run resumes from the one before",
          "[train][parallel][shard]") {
  const contract::RunConfig c = sharded_config(2, 128, contract::ShardLevel::kOptimizer);
  const std::string reference = sharded_run("zero_damage_reference", c);
  if (reference.empty()) MXABLATE_SKIP(kNoGloo);

  const std::string dir = crashed_run("zero_damaged_shard", c, 11, 0);
  const fs::path shard = fs::path(dir) / "checkpoints" / "step-00000010" / "optimizer-shard-00001-of-00002.pt";
  REQUIRE(fs::exists(shard));
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(shard) / 2));
    f.put('\x5a');
  }
  const TrainResult resumed = run_train(dir, nullptr, "--resume");
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  const auto events = effective_events(dir);
  const auto rejected = events_of_kind(events, "checkpoint_rejected");
  REQUIRE(rejected.size() == 1);
  CHECK(rejected[0]["reason"].get<std::string>().find("optimizer-shard-00001-of-00002.pt: checksum does not match") !=
        std::string::npos);
  REQUIRE(events_of_kind(events, "resume").size() == 1);
  CHECK(events_of_kind(events, "resume")[0]["step"] == 5);
  CHECK(trajectory_of(dir).loss == trajectory_of(reference).loss);
}

TEST_CASE("A sharded checkpoint resumes on another number of ranks, re-sharded, and a replicated one is refused",
          "[train][parallel][shard]") {
  const contract::RunConfig two = sharded_config(2, 128, contract::ShardLevel::kGradients);
  const std::string reference = sharded_run("zero_reshard_reference", two);
  if (reference.empty()) MXABLATE_SKIP(kNoGloo);

  const std::string dir = crashed_run("zero_reshard", two, 7, 1);
  SECTION("4 ranks take over 2 ranks' shards") {
    resume_on(dir, two, 4);
    // The weights and moments came back exactly, into other hands: step 6's loss is the same bits,
    // and its sums over 4 ranks of one micro-batch are the 2 ranks' in another order.
    check_one_update_apart(trajectory_of(dir), trajectory_of(reference), 6);
  }
  SECTION("1 rank cannot take a sharded checkpoint: refused before anything starts") {
    contract::RunConfig one = two;
    one.parallel.data = 1;
    one.parallel.shard = contract::ShardLevel::kNone;
    contract::write_run_config(dir + "/config.json", one);
    const TrainResult resumed = run_train(dir, nullptr, "--resume");
    INFO(resumed.output);
    CHECK(resumed.exit_code == 2);
    CHECK(resumed.output.find("parallel.shard: checkpoint ") != std::string::npos);
    CHECK(resumed.output.find("holds the AdamW state in 2 shards") != std::string::npos);
    CHECK(events_of_kind(effective_events(dir), "resume").empty());
  }
}

TEST_CASE("Optimizer shards that overlap are rejected, not read as the moments of another rank count",
          "[train][parallel][shard]") {
  // A checkpoint whose files are consistent with state.json (so no checksum catches it) but whose
  // shard 1 is a copy of shard 0: both claim rank 0's elements and nobody holds rank 1's.
  const contract::RunConfig two = sharded_config(2, 128, contract::ShardLevel::kGradients);
  const std::string dir = crashed_run("zero_overlapping_shards", two, 7, 1);
  if (dir.empty()) MXABLATE_SKIP(kNoGloo);
  const fs::path ckpt = fs::path(dir) / "checkpoints" / "step-00000005";
  const std::string one = optimizer_shard_file(1, 2);
  fs::copy_file(ckpt / optimizer_shard_file(0, 2), ckpt / one, fs::copy_options::overwrite_existing);
  json state;
  std::ifstream(ckpt / "state.json") >> state;
  state["files"][one] = {{"bytes", static_cast<int64_t>(fs::file_size(ckpt / one))},
                         {"sha256", data::sha256_file((ckpt / one).string())}};
  seal_checkpoint_state(state);
  std::ofstream(ckpt / "state.json", std::ios::trunc) << state.dump(2);

  contract::RunConfig four = two;
  four.parallel.data = 4;
  contract::write_run_config(dir + "/config.json", four);
  const TrainResult resumed = run_train(dir, nullptr, "--resume");
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  const auto events = effective_events(dir);
  const auto rejected = events_of_kind(events, "checkpoint_rejected");
  REQUIRE(rejected.size() == 1);
  CHECK(rejected[0]["reason"].get<std::string>().find("two optimizer shards hold the same elements") !=
        std::string::npos);
  // No intact checkpoint is left: the run started over and ran to its end.
  CHECK(events_of_kind(events, "resume")[0]["step"] == 0);
  CHECK(events_of_kind(events, "run_end").back()["status"] == "budget_exhausted");
}

// Each rank snapshots on its training thread and writes on its checkpoint writer's thread, the
// ranks meeting through the store there (docs/design.md §4, "Sharded checkpoints").
TEST_CASE("A sharded run's checkpoints written beside training hold what those written in place hold",
          "[train][parallel][shard][checkpoint]") {
  const contract::RunConfig c = sharded_config(2, 128, contract::ShardLevel::kOptimizer);
  const std::string beside = sharded_run("zero_ckpt_beside", c);
  if (beside.empty()) MXABLATE_SKIP(kNoGloo);
  const std::string in_place = fresh_run_dir("zero_ckpt_in_place");
  const TrainResult r = run_train(in_place, &c, "--debug-synchronous-checkpoints");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  check_same_checkpoints(in_place, beside);  // model.pt and both shards byte for byte
  const auto files = files_of_checkpoint(beside, "step-00000010");
  CHECK(std::count_if(files.begin(), files.end(),
                      [](const std::string& f) { return f.rfind("optimizer-shard-", 0) == 0; }) == 2);
  CHECK(trajectory_of(beside).loss == trajectory_of(in_place).loss);
}

TEST_CASE("A sharded run killed while rank 0 writes a checkpoint resumes from the one before to the uninterrupted curve",
          "[train][parallel][shard][resume]") {
  const contract::RunConfig c = sharded_config(2, 128, contract::ShardLevel::kOptimizer);
  const std::string reference = sharded_run("zero_write_reference", c);
  if (reference.empty()) MXABLATE_SKIP(kNoGloo);
  const std::string dir = fresh_run_dir("zero_killed_writing");
  const TrainResult crashed =
      run_train(dir, &c, "--debug-crash-writing-checkpoint 10 --debug-fault-rank 0");
  INFO(crashed.output);
  REQUIRE(crashed.exit_code == 137);
  const fs::path checkpoints = fs::path(dir) / "checkpoints";
  CHECK_FALSE(fs::exists(checkpoints / "step-00000010"));
  CHECK(fs::exists(checkpoints / "step-00000010.tmp" / optimizer_shard_file(1, 2)));
  resume_on(dir, c, c.parallel.data);
  CHECK(trajectory_of(dir).loss == trajectory_of(reference).loss);
  CHECK(trajectory_of(dir).evals == trajectory_of(reference).evals);
}

TEST_CASE("Sharded runs keep BF16 working copies of the weights no quantizer reads and train as the replicated run, bit for bit",
          "[train][parallel][shard]") {
  using contract::ShardLevel;
  // One micro-batch on each of 2 ranks, clipping off: every sum is the replicated run's (two terms
  // commute), so the working copies and their masters must give the same steps bit for bit.
  const std::string replicated =
      sharded_run("copies_replicated", unclipped(working_copies_config(2, 256, ShardLevel::kNone)));
  if (replicated.empty()) MXABLATE_SKIP(kNoGloo);
  const Trajectory reference = trajectory_of(replicated);
  const json replicated_start = events_of_kind(effective_events(replicated), "run_start").front();
  for (const ShardLevel shard : {ShardLevel::kOptimizer, ShardLevel::kGradients}) {
    INFO("shard " << contract::to_string(shard));
    const std::string dir =
        sharded_run("copies_" + std::string(contract::to_string(shard)), unclipped(working_copies_config(2, 256, shard)));
    check_same_steps(trajectory_of(dir), reference);
  }
  // Two micro-batches per rank: ZeRO-1 adds each micro-batch's float32 gradient where the
  // replicated step's AccumulateGrad adds it.
  const auto micro = [](ShardLevel shard) { return unclipped(three_steps(working_copies_config(2, 128, shard))); };
  check_same_steps(trajectory_of(sharded_run("copies_micro_optimizer", micro(ShardLevel::kOptimizer))),
                   trajectory_of(sharded_run("copies_micro_replicated", micro(ShardLevel::kNone))));
  // On 4 ranks a BF16 copy (2 B) and a quarter of its master (1 B) replace a float32 weight (4 B).
  const std::string four = sharded_run("copies_four", working_copies_config(4, 128, ShardLevel::kOptimizer));
  const json start = events_of_kind(effective_events(four), "run_start").front();
  const double whole = replicated_start["weight_bytes_per_rank"].get<double>();
  CHECK(replicated_start["weight_bytes_per_rank"].get<int64_t>() == 4 * replicated_start["params"].get<int64_t>());
  CHECK(start["weight_bytes_per_rank"].get<double>() < whole * 0.95);
  CHECK(start["weight_bytes_per_rank"].get<double>() >= whole * 0.75);
}

TEST_CASE("A sharded run with BF16 working copies resumes from model.pt's float32 masters to the uninterrupted curve",
          "[train][parallel][shard]") {
  const contract::RunConfig c = working_copies_config(2, 128, contract::ShardLevel::kGradients);
  const std::string reference = sharded_run("copies_uninterrupted", c);
  if (reference.empty()) MXABLATE_SKIP(kNoGloo);
  const std::string dir = crashed_run("copies_rank_dies", c, 7, 1);
  // A copy of the crashed run resumes on 4 ranks: each takes its chunk of the masters from model.pt.
  const std::string reshard = fresh_run_dir("copies_reshard");
  fs::remove_all(reshard);
  fs::copy(dir, reshard, fs::copy_options::recursive);

  resume_on(dir, c, 2);
  // Masters rounded to BF16 on the way would give the same step 6 and part from step 7 on.
  CHECK(trajectory_of(dir).loss == trajectory_of(reference).loss);
  CHECK(trajectory_of(dir).evals == trajectory_of(reference).evals);

  resume_on(reshard, c, 4);
  check_one_update_apart(trajectory_of(reshard), trajectory_of(reference), 6);
}
