// How each of a linear layer's three GEMMs treats its two operands (docs/design.md §1, §3): the
// translation of the run config's precision/quant sections into kernel QuantSpecs.
//
//   GEMM   operand A (axis)      operand B (axis)     SR class of A / B
//   Fprop  X  along K (rows)     W  along K (rows)    activation / weight
//   Dgrad  dY along N (rows)     W  along N (cols)    grad / weight
//   Wgrad  dY along M (cols)     X  along M (cols)    grad / activation
//
// Precision per GEMM: bf16 (operands rounded to BF16), fp8 (per-tensor current scaling: E4M3
// for X and W, E5M2 for dY), mxfp4, nvfp4. A Hadamard rotation, when its GEMM is listed, rotates
// both operands (at any precision, so with bf16 it only changes rounding). A layer kept in BF16
// (LM head, bf16_first/last_blocks) uses plain BF16 for all three GEMMs and no rotation.
// 2-D weight blocks apply to W (Fprop and Dgrad); the SR pre-scale to operands rounded
// stochastically.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mxablate/contract/quant_settings.h"
#include "mxablate/contract/run_config.h"
#include "mxablate/kernels/quant_spec.h"
#include "mxablate/trainer/plan/model_presets.h"

namespace mxablate::trainer {

using contract::GemmPrecision;

struct GemmPlan {
  GemmPrecision precision = GemmPrecision::kBF16;
  bool rotated = false;  // a Hadamard rotation applies to both operands
  std::array<kernels::QuantSpec, 2> operand;  // A, B
};

struct LinearPlan {
  std::array<GemmPlan, 3> gemm;  // indexed by kernels::GemmKind
  // DGE: the weight's gradient is multiplied by the estimator's derivative at W as Fprop
  // quantized it. Set only where Fprop's W is FP4: elsewhere there is no 4-bit step to
  // estimate (plan_rules.h holds what else it needs).
  std::optional<contract::DgeConfig> dge;
  // OCC: X is clamped at the quantile before it is quantized for Fprop and Wgrad, and the
  // residual's products are added back in BF16.
  std::optional<contract::OccConfig> occ;
  const GemmPlan& operator[](kernels::GemmKind g) const { return gemm[static_cast<size_t>(g)]; }
};

// The axis along which a GEMM's operand is quantized, per the table above.
kernels::Axis operand_axis(kernels::GemmKind gemm, kernels::Operand operand);
const char* operand_name(kernels::GemmKind gemm, kernels::Operand operand);  // "x", "w", "dy"
const char* gemm_name(kernels::GemmKind gemm);                             // "fprop", …

// True when the operand is plain BF16 rounding (no rotation): cheaper paths may skip the kernel.
bool is_plain_bf16(const kernels::QuantSpec& spec);
// True when both of W's GEMMs (Fprop, Dgrad) take it plain BF16: one rounding serves both, so the
// weight cache holds one copy of it (weight_cache.h) and the layer makes that one rounding once.
bool weight_shares_rounding(const LinearPlan& plan);
// True when quantizing the operand is worth telemetry (FP8 and the 4-bit formats).
bool is_low_precision(const kernels::QuantSpec& spec);
// True when Q(x) under `spec` is a function of x alone (round to nearest, no random Hadamard
// signs): layers reading the same input may then share it (the engine's QuantMemo), and the
// memory plan counts one copy for them (memory_plan.h).
bool is_memoizable(const kernels::QuantSpec& spec);
// True when two specs quantize alike (every field that changes a value).
bool same_quantization(const kernels::QuantSpec& a, const kernels::QuantSpec& b);

// The plan of a linear layer with these settings.
LinearPlan make_linear_plan(const contract::LayerSettings& settings);
LinearPlan plain_bf16_plan();

// The precision phase of an optimizer step that starts after `tokens_before` tokens: 0 before
// the schedule's first switch, i after the i-th (docs/design.md §4).
size_t precision_phase(const contract::RunConfig& config, double tokens_before);

// What `layer` runs with in `phase`: the blocks' settings of that phase (the LM head: plain BF16),
// then bf16_first/last_blocks as overrides (plain BF16, no DGE or OCC), then the recipe's
// overrides whose pattern matches
// the layer's name, in order (docs/design.md §5).
contract::LayerSettings layer_settings(const contract::RunConfig& config, const LinearShape& layer,
                                       int64_t n_layers, size_t phase);
// Every layer's plan in every precision phase of a run, derived from the config once and passed
// to whatever reads a layer's plan: the model (phase 0, then each switch), the memory plan, the
// weight cache's size, the FP8 shape check and the graph rule.
struct RunLayerPlans {
  std::vector<LinearShape> layers;               // model order (linear_layers)
  std::vector<std::vector<LinearPlan>> phases;   // [phase][layer]; phase 0 before the first switch
};
RunLayerPlans plan_run_layers(const contract::RunConfig& config, std::vector<LinearShape> layers,
                              int64_t n_layers);
// "" when every override pattern matches at least one of `layers`, else a message
// "overrides[i].layers: ..." naming the pattern.
std::string check_override_patterns(const contract::RunConfig& config,
                                    const std::vector<LinearShape>& layers);

// Checks that every quantized operand of a linear (in -> out) with `tokens` rows per
// micro-batch can be blocked and rotated as planned. "" when fine, else one sentence.
std::string check_linear_shapes(const LinearPlan& plan, int64_t in_features, int64_t out_features,
                                int64_t tokens);

}  // namespace mxablate::trainer
