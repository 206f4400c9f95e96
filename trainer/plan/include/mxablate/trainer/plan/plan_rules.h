// When a linear layer's plan may carry the interventions of Wang et al., "Optimizing Large
// Language Model Training Using FP4 Quantization" (arXiv 2501.17116): the differentiable gradient
// estimator (DGE) and outlier clamping and compensation (OCC). One definition of each rule, used
// by the planner (a recipe that breaks one is a config error) and by MXLinear, which refuses such
// a plan (std::invalid_argument) however it was built (docs/design.md §4).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mxablate/trainer/plan/linear_plan.h"

namespace mxablate::trainer {

// "" when plan.dge is unset or usable; otherwise one sentence saying why not. DGE needs Fprop's W
// quantized to an FP4 format (mxfp4, nvfp4) without a rotation: the estimator's derivative is
// taken on the E2M1 grid W was rounded onto, and a rotated W is rounded in another basis. k and
// clamp must be finite and > 0.
std::string check_dge(const LinearPlan& plan);

// "" when plan.occ is unset or usable; otherwise one sentence. The quantile must lie in (0, 1].
std::string check_occ(const LinearPlan& plan);

// "" when every FP8 GEMM the config plans, in any precision phase, has a shape FP8 tensor cores
// take (kernels/gemm_shape.h: K and N multiples of 16; Wgrad reduces over the micro-batch's
// `tokens`); otherwise "LAYER GEMM: why" for the first that does not. The trainer's
// fp8-tensorwise route needs it (docs/design.md §3). A layer of out_features 0 (the LM head
// before the vocabulary is known) is skipped.
std::string check_fp8_tensor_core_shapes(const RunLayerPlans& plans, int64_t tokens);

}  // namespace mxablate::trainer
