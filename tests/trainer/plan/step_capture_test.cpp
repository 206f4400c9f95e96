// The rule of graphed steps (trainer/plan step_capture.h): off never, on wherever it can (else
// one line naming train.cuda_graphs), auto where it can and the step is launch-bound.
#include "mxablate/trainer/plan/step_capture.h"

#include <string>

#include "catch.h"
#include "mxablate/contract/run_config.h"

using namespace mxablate;
using contract::CudaGraphs;
using trainer::StepCaptureFacts;
using trainer::decide_step_capture;

namespace {

// llama-20m at 16k tokens a micro-batch on one CUDA GPU: the case graphs are for.
StepCaptureFacts small_cuda_run() {
  StepCaptureFacts f;
  f.cuda = true;
  f.graphs_available = true;
  f.ranks = 1;
  f.parameters = 22'000'000;
  f.micro_batch_tokens = 16384;
  return f;
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

TEST_CASE("Graphed steps: auto graphs a small one-GPU run, off never does", "[step_capture]") {
  CHECK(decide_step_capture(CudaGraphs::kAuto, small_cuda_run()).graphed);
  CHECK(decide_step_capture(CudaGraphs::kOn, small_cuda_run()).graphed);
  const auto off = decide_step_capture(CudaGraphs::kOff, small_cuda_run());
  CHECK_FALSE(off.graphed);
  CHECK(off.reason == "train.cuda_graphs: off");
}

TEST_CASE("Graphed steps: auto leaves a step whose kernels cover their launches eager", "[step_capture]") {
  StepCaptureFacts big = small_cuda_run();
  big.parameters = 370'000'000;  // llama-350m at 16k tokens: 6.1e12 > 2.5e12
  const auto a = decide_step_capture(CudaGraphs::kAuto, big);
  CHECK_FALSE(a.graphed);
  CHECK(starts_with(a.reason, "parameters × micro-batch tokens is 6.1e+12, above 2.5e+12"));
  // llama-125m at 16k tokens (2e12) is still graphed: it gains from it (docs/performance.md).
  StepCaptureFacts mid = small_cuda_run();
  mid.parameters = 125'000'000;
  CHECK(decide_step_capture(CudaGraphs::kAuto, mid).graphed);
  // `on` graphs it anyway: the size is auto's judgement, not a limit.
  CHECK(decide_step_capture(CudaGraphs::kOn, big).graphed);
  // The boundary itself is graphed.
  StepCaptureFacts edge = small_cuda_run();
  edge.parameters = 2'500'000'000'000 / 16384;
  edge.micro_batch_tokens = 16384;
  CHECK(decide_step_capture(CudaGraphs::kAuto, edge).graphed);
}

TEST_CASE("Graphed steps: what cannot be graphed is auto's reason and on's one-line refusal", "[step_capture]") {
  struct Case {
    const char* what;
    void (*change)(StepCaptureFacts&);
    const char* reason;
  };
  const Case cases[] = {
      {"cpu", [](StepCaptureFacts& f) { f.cuda = false; }, "the run's device is not a CUDA GPU"},
      {"old torch", [](StepCaptureFacts& f) { f.graphs_available = false; }, "this LibTorch cannot capture CUDA graphs"},
      {"ranks", [](StepCaptureFacts& f) { f.ranks = 4; },
       "the run has 4 data-parallel ranks (graphs capture one rank's step)"},
      {"occ", [](StepCaptureFacts& f) { f.reads_back_each_step = true; },
       "a layer clamps outliers (quant.occ), whose threshold is read back every step"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    StepCaptureFacts f = small_cuda_run();
    c.change(f);
    const auto a = decide_step_capture(CudaGraphs::kAuto, f);
    CHECK_FALSE(a.graphed);
    CHECK(a.reason == c.reason);
    try {
      decide_step_capture(CudaGraphs::kOn, f);
      FAIL("on was not refused");
    } catch (const contract::ConfigError& e) {
      CHECK(std::string(e.what()) == std::string("train.cuda_graphs: \"on\", but ") + c.reason);
    }
    CHECK_FALSE(decide_step_capture(CudaGraphs::kOff, f).graphed);
  }
}

TEST_CASE("Graphed steps: the facts a config decides, in every phase and override", "[step_capture]") {
  using contract::GemmPrecision;
  const trainer::ModelShape shape = *trainer::find_model_preset("smoke");
  const auto layers = trainer::linear_layers(shape, 0);  // the planner's: no vocabulary yet
  contract::RunConfig c;
  c.device = contract::Device::kCUDA;
  c.train.cuda_graphs = CudaGraphs::kOn;
  StepCaptureFacts f = trainer::step_capture_facts(c, trainer::plan_run_layers(c, layers, shape.n_layers));
  CHECK(f.cuda);
  CHECK(f.ranks == 1);
  CHECK(f.micro_batch_tokens == contract::micro_batch_tokens(c));
  CHECK_FALSE(f.reads_back_each_step);
  CHECK_NOTHROW(trainer::check_step_capture(c, trainer::plan_run_layers(c, layers, shape.n_layers)));

  // fp8-where-exact decides each MXFP4 GEMM's tiles on the device: MXFP4 GEMMs on it, in a later
  // phase of the schedule or from an override, leave `on` allowed.
  c.quant.gemm_path = contract::GemmPath::kFP8WhereExact;
  c.precision_schedule = {{0.5, {GemmPrecision::kBF16, GemmPrecision::kBF16, GemmPrecision::kMXFP4}}};
  contract::LayerOverride head;
  head.layers = "lm_head";
  head.patch.dgrad = GemmPrecision::kMXFP4;
  c.overrides = {head};
  CHECK_FALSE(trainer::step_capture_facts(c, trainer::plan_run_layers(c, layers, shape.n_layers)).reads_back_each_step);
  CHECK_NOTHROW(trainer::check_step_capture(c, trainer::plan_run_layers(c, layers, shape.n_layers)));
  c.precision_schedule.clear();
  c.overrides.clear();
  c.quant.gemm_path = contract::GemmPath::kAuto;

  // OCC where a block keeps it; none where every block is kept in plain BF16.
  c.quant.occ = contract::OccConfig{};
  CHECK(trainer::step_capture_facts(c, trainer::plan_run_layers(c, layers, shape.n_layers)).reads_back_each_step);
  c.quant.bf16_first_blocks = shape.n_layers;
  CHECK_FALSE(trainer::step_capture_facts(c, trainer::plan_run_layers(c, layers, shape.n_layers)).reads_back_each_step);
  // `auto` and `off` are never refused: auto says why not when the trainer decides.
  c.quant.bf16_first_blocks = 0;
  c.parallel.data = 2;
  for (CudaGraphs g : {CudaGraphs::kAuto, CudaGraphs::kOff}) {
    c.train.cuda_graphs = g;
    CHECK_NOTHROW(trainer::check_step_capture(c, trainer::plan_run_layers(c, layers, shape.n_layers)));
  }
}
