// mxablate-train's GEMM routes (contract/gemm_routing.h) as a run shows them: run_start names the
// engine of every GEMM precision, a fallback of quant.gemm_path auto is said in the log, and on a
// GPU with FP8 tensor cores the FP8 arm runs on them and trains like its exact emulation.
#include <cmath>
#include <string>

#include "catch.h"
#include "run_test_support.h"
#include "test_support.h"

using namespace mxablate;
using namespace mxablate::test;
using nlohmann::json;

namespace {

constexpr auto kFP8 = contract::GemmPrecision::kFP8;

contract::RunConfig fp8_arm(contract::Device device) {
  contract::RunConfig c = smoke_config();
  c.precision = {kFP8, kFP8, kFP8};
  c.device = device;
  c.train.max_tokens = 1024 * 4;
  c.eval.every_tokens = 1024 * 4;
  c.checkpoint.every_steps = 0;
  c.telemetry.train_every_steps = 1;
  return c;
}

const std::string kFallbackLine = "mxablate-train: quant.gemm_path auto: the fp8 GEMMs run emulated: ";

}  // namespace

TEST_CASE("An FP8 arm on the CPU runs emulated and says so, in the log and in run_start", "[train]") {
  const contract::RunConfig c = fp8_arm(contract::Device::kCPU);
  const std::string dir = fresh_run_dir("fp8_arm_cpu");
  const TrainResult r = run_train(dir, &c);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, has_text(kFallbackLine + "FP8 tensor cores need a CUDA device and the GPU kernels, this is cpu"));
  const auto starts = events_of_kind(effective_events(dir), "run_start");
  REQUIRE(starts.size() == 1);
  const json routes = starts[0]["gemm_routes"];
  CHECK(routes["setting"] == "auto");
  CHECK(routes["fp8"] == "emulated");
  CHECK(routes["mxfp4"] == "emulated");
  CHECK(routes["bf16"] == "emulated");
  REQUIRE(routes.contains("fallback"));
  CHECK(routes["fallback"]["fp8"].get<std::string>().rfind("FP8 tensor cores need a CUDA device", 0) == 0);
}

TEST_CASE("Forced emulation and runs without FP8 GEMMs say nothing of FP8 tensor cores", "[train]") {
  contract::RunConfig forced = fp8_arm(contract::Device::kCPU);
  forced.quant.gemm_path = contract::GemmPath::kEmulated;
  contract::RunConfig bf16 = fp8_arm(contract::Device::kCPU);
  bf16.precision = {};
  for (const contract::RunConfig* c : {&forced, &bf16}) {
    const std::string dir = fresh_run_dir(c == &forced ? "fp8_arm_forced" : "bf16_arm_routes");
    const TrainResult r = run_train(dir, c);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK(r.output.find("GEMMs run emulated") == std::string::npos);
    const auto starts = events_of_kind(effective_events(dir), "run_start");
    REQUIRE(starts.size() == 1);
    // A config without FP8 GEMMs spells auto "emulated" in its config.json (the same bits; its
    // run id stays what it was), so the BF16 run reads emulated too: nothing falls back.
    CHECK(starts[0]["gemm_routes"]["setting"] == "emulated");
    CHECK(starts[0]["gemm_routes"]["fp8"] == "emulated");
    CHECK_FALSE(starts[0]["gemm_routes"].contains("fallback"));
  }
}

TEST_CASE("On CUDA the FP8 arm runs on FP8 tensor cores and trains like its exact emulation", "[train][gpu]") {
  contract::RunConfig tensor_cores = fp8_arm(contract::Device::kCUDA);
  tensor_cores.train.max_tokens = 1024 * 20;
  tensor_cores.eval.every_tokens = 1024 * 20;
  contract::RunConfig emulated = tensor_cores;
  emulated.quant.gemm_path = contract::GemmPath::kEmulated;
  const std::string tc_dir = fresh_run_dir("fp8_arm_cuda");
  const TrainResult tc = run_train(tc_dir, &tensor_cores);
  INFO(tc.output);
  if (tc.output.find("device: \"cuda\" requested") != std::string::npos)
    MXABLATE_SKIP("no CUDA device for mxablate-train here");
  REQUIRE(tc.exit_code == 0);
  const auto starts = events_of_kind(effective_events(tc_dir), "run_start");
  REQUIRE(starts.size() == 1);
  if (starts[0]["gemm_routes"]["fp8"] != "fp8-tensorwise")
    MXABLATE_SKIP("this GPU or build has no FP8 tensor cores: " << starts[0]["gemm_routes"].dump());
  CHECK_FALSE(starts[0]["gemm_routes"].contains("fallback"));
  const std::string emu_dir = fresh_run_dir("fp8_arm_cuda_emulated");
  const TrainResult emu = run_train(emu_dir, &emulated);
  INFO(emu.output);
  REQUIRE(emu.exit_code == 0);
  // The same products accumulated in FP32 in another order: after 20 steps the losses agree to
  // well within the run-to-run noise of an FP8 arm (a 1 % band, measured differences ~1e-3).
  const auto tc_train = events_of_kind(effective_events(tc_dir), "train");
  const auto emu_train = events_of_kind(effective_events(emu_dir), "train");
  REQUIRE(tc_train.size() == emu_train.size());
  REQUIRE(tc_train.size() >= 20);
  for (size_t i = 0; i < tc_train.size(); ++i) {
    const double a = tc_train[i]["loss"].get<double>(), b = emu_train[i]["loss"].get<double>();
    INFO("step " << tc_train[i]["step"] << ": tensor cores " << a << ", emulated " << b);
    CHECK(std::isfinite(a));
    CHECK(std::abs(a - b) < 0.01 * b);
  }
  const auto tc_curve = eval_curve(effective_events(tc_dir));
  const auto emu_curve = eval_curve(effective_events(emu_dir));
  REQUIRE(tc_curve.size() == emu_curve.size());
  CHECK(std::abs(tc_curve.back().second - emu_curve.back().second) < 0.01 * emu_curve.back().second);
}

TEST_CASE("quant.gemm_path fp8-where-exact on the CPU is refused in one line, exit 2", "[train]") {
  contract::RunConfig c = fp8_arm(contract::Device::kCPU);
  c.precision = {contract::GemmPrecision::kMXFP4, contract::GemmPrecision::kMXFP4, contract::GemmPrecision::kMXFP4};
  c.quant.gemm_path = contract::GemmPath::kFP8WhereExact;
  const std::string dir = fresh_run_dir("mxfp4_where_exact_cpu");
  const TrainResult r = run_train(dir, &c);
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, has_text("quant.gemm_path: \"fp8-where-exact\" (FP8 and MXFP4 GEMMs on FP8 tensor cores) "
                                "needs device: cuda, this run's device is \"cpu\""));
}

TEST_CASE("On CUDA an MXFP4 arm under fp8-where-exact counts its output tiles each way and trains like the emulation", "[train][gpu]") {
  contract::RunConfig where_exact = fp8_arm(contract::Device::kCUDA);
  use_every_random_stream(where_exact);  // MXFP4 everywhere, SR gradients, a random rotation of Wgrad
  where_exact.train.max_tokens = 1024 * 20;
  where_exact.eval.every_tokens = 1024 * 20;
  where_exact.quant.gemm_path = contract::GemmPath::kFP8WhereExact;
  contract::RunConfig emulated = where_exact;
  emulated.quant.gemm_path = contract::GemmPath::kEmulated;
  const std::string dir = fresh_run_dir("mxfp4_where_exact_cuda");
  const TrainResult r = run_train(dir, &where_exact);
  INFO(r.output);
  if (r.output.find("device: \"cuda\" requested") != std::string::npos)
    MXABLATE_SKIP("no CUDA device for mxablate-train here");
  if (r.exit_code == 2 && r.output.find("fp8-where-exact\" cannot run") != std::string::npos)
    MXABLATE_SKIP("this GPU or build has no FP8 tensor cores");
  REQUIRE(r.exit_code == 0);
  const auto events = effective_events(dir);
  const auto starts = events_of_kind(events, "run_start");
  REQUIRE(starts.size() == 1);
  CHECK(starts[0]["gemm_routes"]["mxfp4"] == "mxfp4-as-fp8");
  CHECK(starts[0]["gemm_routes"]["declined"] == json{{"mxfp4", {{"wgrad", "emulated"}}}});
  const auto ends = events_of_kind(events, "run_end");
  REQUIRE(ends.size() == 1);
  REQUIRE(ends[0].contains("mxfp4_as_fp8_tiles"));
  const json tiles = ends[0]["mxfp4_as_fp8_tiles"];
  int64_t on_tensor_cores = 0, total = 0;
  const auto all = [&](const char* g) {
    return tiles[g]["tensor_cores"].get<int64_t>() + tiles[g]["recomputed"].get<int64_t>();
  };
  for (const char* g : {"fprop", "dgrad"}) {
    on_tensor_cores += tiles[g]["tensor_cores"].get<int64_t>();
    total += all(g);
    CHECK(all(g) > 0);
  }
  CHECK(all("wgrad") == 0);  // the route declines Wgrad: it multiplies on the emulation
  CHECK(on_tensor_cores > 0);
  INFO("output tiles kept from FP8 tensor cores: " << on_tensor_cores << " of " << total);

  const std::string emu_dir = fresh_run_dir("mxfp4_where_exact_cuda_emulated");
  const TrainResult emu = run_train(emu_dir, &emulated);
  INFO(emu.output);
  REQUIRE(emu.exit_code == 0);
  // The same exact products summed in FP32 in another order: the losses agree to well within an
  // MXFP4 arm's run-to-run noise.
  const Trajectory a = trajectory_of(dir), b = trajectory_of(emu_dir);
  REQUIRE(a.loss.size() == b.loss.size());
  REQUIRE(a.loss.size() >= 20);
  for (size_t i = 0; i < a.loss.size(); ++i) {
    INFO("step " << i + 1 << ": fp8-where-exact " << a.loss[i] << ", emulated " << b.loss[i]);
    CHECK(std::isfinite(a.loss[i]));
    CHECK(within(a.loss[i], b.loss[i], 0.01));
  }
}
