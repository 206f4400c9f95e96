#include "mxablate/trainer/plan/step_capture.h"

#include <fmt/format.h>

#include "mxablate/contract/run_config.h"
#include "mxablate/trainer/plan/linear_plan.h"

namespace mxablate::trainer {
namespace {

// Why a run cannot be graphed at all, or "" when it can.
std::string cannot_graph(const StepCaptureFacts& f) {
  if (!f.cuda) return "the run's device is not a CUDA GPU";
  if (!f.graphs_available) return "this LibTorch cannot capture CUDA graphs";
  // A data-parallel step sums gradients across the ranks inside its last backward pass
  // (docs/design.md §4, "Data-parallel runs"); a graph would hold one rank's collectives.
  if (f.ranks > 1) return fmt::format("the run has {} data-parallel ranks (graphs capture one rank's step)", f.ranks);
  // OCC's clamp threshold is read back to the host every forward pass: a graph would keep the
  // threshold of the step it was captured in.
  if (f.reads_back_each_step) return "a layer clamps outliers (quant.occ), whose threshold is read back every step";
  return "";
}

}  // namespace

StepCapture decide_step_capture(contract::CudaGraphs setting, const StepCaptureFacts& facts) {
  if (setting == contract::CudaGraphs::kOff) return {false, "train.cuda_graphs: off"};
  const std::string why_not = cannot_graph(facts);
  if (setting == contract::CudaGraphs::kOn) {
    if (!why_not.empty()) throw contract::ConfigError("train.cuda_graphs: \"on\", but " + why_not);
    return {true, ""};
  }
  if (!why_not.empty()) return {false, why_not};
  const double work = static_cast<double>(facts.parameters) * static_cast<double>(facts.micro_batch_tokens);
  if (work > kGraphedStepWorkLimit)
    return {false, fmt::format("parameters × micro-batch tokens is {:.2g}, above {:.2g}: launches are not the bound",
                               work, kGraphedStepWorkLimit)};
  return {true, fmt::format("parameters × micro-batch tokens is {:.2g}, at most {:.2g}", work, kGraphedStepWorkLimit)};
}

StepCaptureFacts step_capture_facts(const contract::RunConfig& config, const RunLayerPlans& plans) {
  StepCaptureFacts f;
  f.cuda = config.device == contract::Device::kCUDA;
  f.ranks = config.parallel.data;
  f.micro_batch_tokens = contract::micro_batch_tokens(config);
  // Every GEMM route decides on the device (mxfp4-as-fp8 included: its fix-up reads the line
  // marks there), so only OCC's threshold is read back.
  for (const std::vector<LinearPlan>& phase : plans.phases)
    for (const LinearPlan& p : phase) f.reads_back_each_step = f.reads_back_each_step || p.occ.has_value();
  return f;
}

void check_step_capture(const contract::RunConfig& config, const RunLayerPlans& plans) {
  if (config.train.cuda_graphs != contract::CudaGraphs::kOn) return;
  StepCaptureFacts facts = step_capture_facts(config, plans);
  facts.graphs_available = true;  // the build's part: the trainer's to find
  decide_step_capture(config.train.cuda_graphs, facts);
}

}  // namespace mxablate::trainer
