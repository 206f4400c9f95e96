// Graphed steps (trainer/run/src/step_graph.h, the rule in trainer/plan step_capture.h): on a
// GPU a run whose steps replay a captured CUDA graph computes the same bits as the eager run —
// every arm's random streams included, across telemetry steps (eager) and a precision switch
// (recaptured); where graphs cannot run, `on` is refused with one line and `auto` says why not.
#include <string>
#include <vector>

#include "catch.h"
#include "run_test_support.h"
#include "test_support.h"

using namespace mxablate;
using namespace mxablate::test;
using nlohmann::json;

namespace {

constexpr auto kMX = contract::GemmPrecision::kMXFP4;
constexpr auto kFP8 = contract::GemmPrecision::kFP8;

contract::RunConfig graph_config(contract::CudaGraphs graphs) {
  contract::RunConfig c = smoke_config();
  c.device = contract::Device::kCUDA;
  c.train.cuda_graphs = graphs;
  c.train.global_batch_tokens = 1024;
  c.train.micro_batch_tokens = 512;  // two micro-batches a step: both inside one graph
  c.train.max_tokens = 1024 * 16;
  c.eval.every_tokens = 1024 * 8;
  c.checkpoint.every_steps = 0;
  c.telemetry.train_every_steps = 1;
  c.telemetry.quant_every_steps = 5;  // steps 0, 5, 10, 15 run eagerly between replays
  return c;
}

struct Arm {
  const char* name;
  void (*set)(contract::RunConfig&);
};

const Arm kArms[] = {
    {"bf16", [](contract::RunConfig&) {}},
    {"fp8", [](contract::RunConfig& c) { c.precision = {kFP8, kFP8, kFP8}; }},
    {"FDW", [](contract::RunConfig& c) { c.precision = {kMX, kMX, kMX}; }},
    // Stochastic rounding and per-step random Hadamard signs: keyed by the step, which the
    // graph's kernels read from device memory at each replay.
    {"FDW+SR+RHT16", [](contract::RunConfig& c) { use_every_random_stream(c); }},
    // A switch from FP8 to MXFP4 half-way: the graph of the first phase is dropped, the second
    // captured after its warm-up step.
    {"fp8-then-FDW", [](contract::RunConfig& c) {
       c.precision = {kFP8, kFP8, kFP8};
       c.precision_schedule = {{0.5, {kMX, kMX, kMX}}};
     }},
};

}  // namespace

TEST_CASE("train.cuda_graphs on a CPU run: on is refused in one line, auto says why not", "[train]") {
  contract::RunConfig on = smoke_config();
  on.train.cuda_graphs = contract::CudaGraphs::kOn;
  const std::string on_dir = fresh_run_dir("cuda_graphs_on_cpu");
  const TrainResult refused = run_train(on_dir, &on);
  INFO(refused.output);
  CHECK(refused.exit_code == 2);
  CHECK_THAT(refused.output, has_text("train.cuda_graphs: \"on\", but the run's device is not a CUDA GPU"));

  contract::RunConfig plain = smoke_config();
  plain.train.max_tokens = 1024 * 2;
  plain.eval.every_tokens = 1024 * 2;
  const std::string dir = fresh_run_dir("cuda_graphs_auto_cpu");
  const TrainResult r = run_train(dir, &plain);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto starts = events_of_kind(effective_events(dir), "run_start");
  REQUIRE(starts.size() == 1);
  CHECK(starts[0]["cuda_graphs"]["graphed"] == false);
  CHECK(starts[0]["cuda_graphs"]["reason"] == "the run's device is not a CUDA GPU");
}

TEST_CASE("Graphed steps on CUDA compute the eager run's bits, arm by arm", "[train][gpu]") {
  for (const Arm& arm : kArms) {
    DYNAMIC_SECTION(arm.name) {
      contract::RunConfig graphed = graph_config(contract::CudaGraphs::kOn);
      arm.set(graphed);
      contract::RunConfig eager = graphed;
      eager.train.cuda_graphs = contract::CudaGraphs::kOff;
      const std::string g_dir = fresh_run_dir(std::string("graphed_") + arm.name);
      const TrainResult g = run_train(g_dir, &graphed);
      INFO(g.output);
      if (g.output.find("device: \"cuda\" requested") != std::string::npos)
        MXABLATE_SKIP("no CUDA device for mxablate-train here");
      REQUIRE(g.exit_code == 0);
      const auto starts = events_of_kind(effective_events(g_dir), "run_start");
      REQUIRE(starts.size() == 1);
      REQUIRE(starts[0]["cuda_graphs"]["graphed"] == true);
      const std::string e_dir = fresh_run_dir(std::string("eager_") + arm.name);
      const TrainResult e = run_train(e_dir, &eager);
      INFO(e.output);
      REQUIRE(e.exit_code == 0);
      // 16 steps: 4 telemetry steps and 1 (2 with the switch) warm-up run eagerly.
      const auto ends = events_of_kind(effective_events(g_dir), "run_end");
      REQUIRE(ends.size() == 1);
      CHECK(ends[0]["graphed_steps"].get<int64_t>() == (arm.set == kArms[4].set ? 10 : 11));
      const Trajectory gt = trajectory_of(g_dir), et = trajectory_of(e_dir);
      REQUIRE(gt.loss.size() == 16);
      REQUIRE(gt.loss.size() == et.loss.size());
      for (size_t i = 0; i < gt.loss.size(); ++i) {
        INFO("step " << i + 1);
        CHECK(gt.loss[i] == et.loss[i]);
        CHECK(gt.grad_norm[i] == et.grad_norm[i]);
      }
      CHECK(gt.evals == et.evals);
    }
  }
}
