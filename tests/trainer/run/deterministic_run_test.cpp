// train.deterministic (docs/design.md §4, "Runs that repeat bit for bit"): on a GPU two runs of
// one config repeat each other bit for bit, at a size where the default kernels do not (llama-125m,
// 16,384 tokens a micro-batch: cuDNN's attention backward sums in an order that varies); on the
// CPU the setting is accepted and changes nothing (CPU runs repeat themselves at fixed threads).
// The GPU case also prints what the setting costs, measured in the same process.
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "catch.h"
#include "run_test_support.h"
#include "test_support.h"

using namespace mxablate;
using namespace mxablate::test;

namespace {

constexpr auto kMX = contract::GemmPrecision::kMXFP4;

// The first step (1-based) at which two trajectories differ in loss or gradient norm, 0 if none.
size_t first_difference(const Trajectory& a, const Trajectory& b) {
  for (size_t i = 0; i < std::min(a.loss.size(), b.loss.size()); ++i)
    if (a.loss[i] != b.loss[i] || a.grad_norm[i] != b.grad_norm[i]) return i + 1;
  return a.loss.size() == b.loss.size() ? 0 : std::min(a.loss.size(), b.loss.size()) + 1;
}

// The median of the run's train events' tokens/s after its first two steps (warm-up, capture).
double median_tokens_per_s(const std::string& dir) {
  std::vector<double> rates;
  for (const auto& e : events_of_kind(effective_events(dir), "train"))
    if (e["step"].get<int64_t>() > 2) rates.push_back(e["tokens_per_s"].get<double>());
  if (rates.empty()) return 0;
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

}  // namespace

TEST_CASE("train.deterministic on the CPU changes no bit of a run", "[train]") {
  contract::RunConfig plain = smoke_config();
  plain.train.max_tokens = 1024 * 6;
  plain.eval.every_tokens = 1024 * 3;
  plain.telemetry.train_every_steps = 1;
  contract::RunConfig deterministic = plain;
  deterministic.train.deterministic = true;
  const std::string p_dir = fresh_run_dir("deterministic_off_cpu");
  const std::string d_dir = fresh_run_dir("deterministic_on_cpu");
  const TrainResult p = run_train(p_dir, &plain);
  INFO(p.output);
  REQUIRE(p.exit_code == 0);
  const TrainResult d = run_train(d_dir, &deterministic);
  INFO(d.output);
  REQUIRE(d.exit_code == 0);
  const Trajectory pt = trajectory_of(p_dir), dt = trajectory_of(d_dir);
  REQUIRE(pt.loss.size() == 6);
  CHECK(first_difference(pt, dt) == 0);
  CHECK(pt.evals == dt.evals);
}

TEST_CASE("With train.deterministic two llama-125m runs on CUDA repeat each other bit for bit", "[train][gpu]") {
  struct Arm {
    const char* name;
    void (*set)(contract::RunConfig&);
  };
  const Arm arms[] = {
      {"bf16", [](contract::RunConfig&) {}},
      {"FDW+H16", [](contract::RunConfig& c) {
         c.precision = {kMX, kMX, kMX};
         c.quant.hadamard = {kernels::HadamardMode::kDeterministic, 16, {kernels::GemmKind::kWgrad}};
       }},
  };
  for (const Arm& arm : arms) {
    DYNAMIC_SECTION(arm.name) {
      contract::RunConfig c = smoke_config();
      arm.set(c);
      c.model = "llama-125m";
      c.device = contract::Device::kCUDA;
      c.data.seq_len = 512;
      c.train.global_batch_tokens = 65536;
      c.train.micro_batch_tokens = 16384;  // four micro-batches a step, as the speed table's
      c.train.max_tokens = 65536 * 12;
      c.train.warmup_tokens = 65536 * 2;
      c.train.lr = 1e-3;
      c.eval.every_tokens = 65536 * 6;
      c.eval.tokens = 4096;
      c.checkpoint.every_steps = 0;
      c.telemetry.train_every_steps = 1;
      c.telemetry.quant_every_steps = 0;
      contract::RunConfig d = c;
      d.train.deterministic = true;
      std::vector<Trajectory> runs;
      std::vector<double> rates;
      for (const auto& [config, label] : {std::pair{&d, "on_a"}, std::pair{&d, "on_b"},
                                          std::pair{&c, "off_a"}, std::pair{&c, "off_b"}}) {
        const std::string dir = fresh_run_dir(std::string("deterministic_") + label + "_" + arm.name);
        const TrainResult r = run_train(dir, config);
        INFO(r.output);
        if (r.output.find("device: \"cuda\" requested") != std::string::npos)
          MXABLATE_SKIP("no CUDA device for mxablate-train here");
        REQUIRE(r.exit_code == 0);
        runs.push_back(trajectory_of(dir));
        rates.push_back(median_tokens_per_s(dir));
      }
      REQUIRE(runs[0].loss.size() == 12);
      INFO("deterministic runs first differ at step " << first_difference(runs[0], runs[1]));
      CHECK(first_difference(runs[0], runs[1]) == 0);
      CHECK(runs[0].evals == runs[1].evals);
      // What the setting costs and what it buys, for docs/performance.md.
      const size_t default_differs = first_difference(runs[2], runs[3]);
      std::cout << "train.deterministic " << arm.name << ": tokens/s on " << rates[0] << ", " << rates[1]
                << ", off " << rates[2] << ", " << rates[3] << " (on / off, means of the pairs: "
                << (rates[0] + rates[1]) / (rates[2] + rates[3]) << "); without it the two runs "
                << (default_differs == 0 ? std::string("repeat each other")
                                         : "first differ at step " + std::to_string(default_differs))
                << "\n";
    }
  }
}

// Recompute changes no bit on CUDA either (docs/design.md §4, "Recompute chosen by the memory
// plan"): with deterministic kernels (so that two runs can be compared at all), llama-125m's
// trajectory with none, half and all of its 12 blocks recomputed, and with selective recompute
// alone, with half the blocks besides, and with the fused producers (which then make nothing of
// h ahead for down's Wgrad), bit for bit, in an MXFP4 arm with every random stream and a rotation.
TEST_CASE("Every recompute setting gives the same CUDA trajectory bit for bit", "[train][gpu]") {
  contract::RunConfig c = smoke_config();
  c.model = "llama-125m";
  c.device = contract::Device::kCUDA;
  c.precision = {kMX, kMX, kMX};
  c.quant.stochastic_rounding.add(contract::OperandClass::kGrad);
  c.quant.hadamard = {kernels::HadamardMode::kPerStepRandom, 16, {kernels::GemmKind::kWgrad}};
  c.data.seq_len = 512;
  c.train.global_batch_tokens = 32768;
  c.train.micro_batch_tokens = 16384;
  c.train.max_tokens = 32768 * 6;
  c.train.deterministic = true;
  c.eval.every_tokens = 32768 * 3;
  c.eval.tokens = 4096;
  c.checkpoint.every_steps = 0;
  c.telemetry.train_every_steps = 1;
  c.telemetry.quant_every_steps = 0;
  using Mode = contract::Recompute::Mode;
  std::vector<Trajectory> runs;
  struct Setting {
    contract::Recompute recompute;
    bool fused_producers = false;
  };
  for (const Setting& setting :
       {Setting{contract::Recompute{}}, Setting{contract::Recompute{Mode::kFirstBlocks, 6}},
        Setting{contract::Recompute{Mode::kAll, 0}}, Setting{contract::Recompute{Mode::kNone, 0, true}},
        Setting{contract::Recompute{Mode::kFirstBlocks, 6, true}},
        Setting{contract::Recompute{Mode::kNone, 0, true}, true}}) {
    const contract::Recompute& r = setting.recompute;
    contract::RunConfig cfg = c;
    cfg.train.activation_checkpointing = r;
    cfg.train.fused_producers = setting.fused_producers;
    const std::string dir = fresh_run_dir("recompute_cuda_" + contract::to_string(r) +
                                          (setting.fused_producers ? "_producers" : ""));
    const TrainResult result = run_train(dir, &cfg);
    INFO(result.output);
    if (result.output.find("device: \"cuda\" requested") != std::string::npos)
      MXABLATE_SKIP("no CUDA device for mxablate-train here");
    REQUIRE(result.exit_code == 0);
    runs.push_back(trajectory_of(dir));
    INFO("recompute " << contract::to_string(r) << (setting.fused_producers ? " with fused producers" : "")
                      << " first differs at step "
                      << first_difference(runs.front(), runs.back()));
    REQUIRE(runs.back().loss.size() == 6);
    CHECK(first_difference(runs.front(), runs.back()) == 0);
    CHECK(runs.front().evals == runs.back().evals);
  }
}
