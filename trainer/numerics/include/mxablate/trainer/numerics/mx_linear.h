// MXLinear: a bias-free linear layer Y = X Wᵀ whose three GEMMs (Fprop, Dgrad, Wgrad) each run
// at their own precision with their own quantization options (a LinearPlan), as a custom
// autograd function. Operands are quantized along each GEMM's reduction dimension (docs/design.md §1)
// through the kernels' LibTorch adapter: the CPU reference for CPU tensors, the GPU kernels for
// CUDA tensors. Random streams (stochastic rounding, random Hadamard signs) are keyed by
// (run seed, optimizer step, layer, GEMM, operand), so every run is reproducible.
//
// Each GEMM runs on one engine (kernels/torch/gemm_engine.h, docs/design.md §3), picked when the
// layer's state is made from the route of the GEMM's precision (QuantSession::routes): forward
// and backward only ask it for operands and products.
//
// Numerics of the emulated engine: the quantized (dequantized) operands are exactly representable
// in BF16; on CUDA they are multiplied as BF16 with FP32 accumulation (cuBLAS), on the CPU as
// float32 — the same exact products, FP32 accumulation. Y is the GEMM's result: BF16 on CUDA,
// float32 on the CPU (float32 also where an OCC residual is added, or the hopper-fp8 engine
// returns it); dY is taken in whatever dtype it arrives; dX has x's dtype and dW the weight's
// (float32). See docs/design.md §4 for the trainer's dtype convention.
// GEMMs routed to FP8 tensor cores multiply the same values: per-tensor FP8 codes
// (fp8-tensorwise, BF16 result), MXFP4 re-expressed as E4M3 with 1x128 scales (hopper-fp8,
// float32 result) or with one scale per line where exact (mxfp4-as-fp8, BF16 result; the
// emulation's BF16 GEMM of the values where not), FP32 accumulation.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "mxablate/contract/gemm_routing.h"
#include "mxablate/kernels/quantize.h"
#include "mxablate/kernels/torch/gemm_engine.h"
#include "mxablate/kernels/torch/produced_operands.h"
#include "mxablate/trainer/numerics/fp8_history.h"
#include "mxablate/trainer/plan/linear_plan.h"
#include "mxablate/trainer/numerics/quant_memo.h"
#include "mxablate/trainer/rules/run_events.h"

namespace mxablate::trainer {

// What the trainer sets before each step, shared by every MXLinear of a model.
class QuantSession {
 public:
  struct Record {
    int layer = 0;
    kernels::GemmKind gemm = kernels::GemmKind::kFprop;
    kernels::Operand operand = kernels::Operand::kA;
    kernels::QuantTelemetry telemetry;
    // Fprop's X under OCC: the share of X's elements clamped and compensated (occ.h).
    std::optional<double> occ_fraction;
  };

  uint64_t seed = 0;
  uint32_t step = 0;
  // While a step is captured into a CUDA graph: the device word the graph's launches read the
  // step from at replay (RngKey::step_source; step_graph.h). Null otherwise.
  const uint32_t* device_step = nullptr;
  // The route of each GEMM precision (contract/gemm_routing.h), resolved once by the trainer
  // before the model is built: FP8 GEMMs on FP8 tensor cores (fp8-tensorwise), MXFP4 GEMMs on
  // the Hopper FP8 path or on mxfp4-as-fp8, the rest (and everything by default) the exact
  // emulation. Read when a
  // LinearState is made (it picks its engines then), not per GEMM.
  contract::GemmRoutes routes;
  // While true, every low-precision operand quantization appends a Record.
  bool collect_telemetry = false;
  // Deterministic quantizations of a layer input shared by the layers that consume it (q, k, v;
  // gate, up) within a step; `memo.enabled = false` turns reuse off (quant_memo.h).
  QuantMemo memo;
  // Quantizations a fused producer made ahead of the one layer that consumes them (SwiGLU's h
  // for down; dg and du for gate and up; docs/design.md §4, "Quantization in the producers"),
  // keyed by the produced tensor and taken by that layer, so any spec (its own random key) fits.
  // Two inputs at once: dg and du are made before either consumer runs.
  QuantMemo made_ahead{/*one_key=*/true, /*inputs=*/2};
  // Whether fused producers make their consumers' quantizations (train.fused_producers, default
  // off): the same bits either way, so it is an execution setting.
  bool fused_producers = false;
  // FP8 delayed scaling (quant.fp8_scaling: delayed; docs/design.md §3): every FP8 operand takes
  // its decode scale from its instance's window and records its amax there. Null: current scaling.
  std::shared_ptr<Fp8AmaxHistory> fp8_history;
  // Each layer keeps its weight's operands for the step (LinearState::weight_memo): the trainer
  // sets this by the rule of weight_cache.h.
  bool cache_weight_operands = false;
  // Advanced by the trainer wherever the weights may have changed since the last pass: at the
  // start of each step and of each evaluation (the optimizer and a checkpoint restore write the
  // weights in place, which their version counters do not reliably show). A weight memo's
  // entries belong to one (step, generation): weight_epoch().
  uint64_t weights_generation = 0;
  uint64_t weight_epoch() const { return (weights_generation << 32) | step; }

  // Output tiles of one GEMM kind on the mxfp4-as-fp8 route, kept from the FP8 tensor cores or
  // recomputed by the fix-up: counted on the device by the engine (GemmEngine::multiply's
  // route_tiles) while `count_route_calls` is set (the trainer clears it while it evaluates:
  // run_end reports the training passes' tiles), read back once, at run_end.
  bool count_route_calls = true;
  // The counters of `gemm`'s tiles on `device` (made, zeroed, on the first call: an eager pass
  // runs before any step is captured), or null while counting is off.
  const at::Tensor* mxfp4_as_fp8_tile_counters(kernels::GemmKind gemm, const at::Device& device);
  std::array<RouteTiles, 3> mxfp4_as_fp8_tiles() const;  // indexed by kernels::GemmKind; synchronizes

  void record(int layer, kernels::GemmKind gemm, kernels::Operand operand,
              const kernels::QuantTelemetry& telemetry,
              std::optional<double> occ_fraction = std::nullopt);
  // The records made since the last call, in (layer, GEMM, operand) order.
  std::vector<Record> take_records();

 private:
  std::mutex mutex_;  // backward may run on an autograd worker thread
  std::vector<Record> records_;
  at::Tensor route_tiles_;                    // int64 [3][2] on the device, made on first use
  std::array<at::Tensor, 3> route_tile_rows_;  // its rows, the counters one GEMM kind adds to
};

// One layer's identity and plan, shared with the autograd nodes that outlive a forward call, and
// the engine of each of its GEMMs, picked here once (docs/design.md §3): the engine of the route
// session->routes gives the GEMM's precision when that engine takes both operand formats (FP8
// tensor cores: both FP8, not both E5M2; hopper-fp8: both MXFP4) and GEMMs of its kind
// (mxfp4-as-fp8 declines Wgrad), else the emulated one. A
// state never changes: a new plan or new routes take a new state (MXLinearImpl::set_plan).
struct LinearState {
  LinearState(int layer, LinearPlan plan, std::shared_ptr<QuantSession> session);

  int layer = 0;
  LinearPlan plan;
  std::shared_ptr<QuantSession> session;

  // The layer's weight operands of the current step (Q(W) along rows for Fprop, down columns for
  // Dgrad), reused by every micro-batch and recomputed forward while session->cache_weight_operands
  // is set, for one session->weight_epoch(): one random key per operand within a step, so any
  // spec is reused. Shared by the copies of this state; a new plan makes a new state and memo.
  std::shared_ptr<QuantMemo> weight_memo = std::make_shared<QuantMemo>(/*one_key=*/true);

  kernels::RngKey key(kernels::GemmKind gemm, kernels::Operand operand) const;
  const kernels::GemmEngine& engine(kernels::GemmKind gemm) const {
    return *engines_[static_cast<size_t>(gemm)];
  }

 private:
  std::array<const kernels::GemmEngine*, 3> engines_{};  // indexed by kernels::GemmKind
};

// A layer input that the backward makes again instead of keeping (selective recompute:
// docs/design.md §4, "Recompute chosen by the memory plan"): a norm's output or SwiGLU's product,
// made from tensors whose own backward keeps them anyway (the residual stream, the gate's and up's
// outputs), so that its Wgrad readers save nothing of X. Made once, without grad, by the first
// reader's backward; shared by the readers (q, k, v; gate, up), which then find its quantization in
// the session's memo as the forward's readers did; let go, with its sources, once the last reader
// has taken it. The sources' version counters are checked at the making: a source changed in place
// since the forward is an error, not a silently different X.
class RebuiltInput {
 public:
  using Make = std::function<at::Tensor(const std::vector<at::Tensor>&)>;
  RebuiltInput(std::vector<at::Tensor> sources, Make make);
  // One more layer whose backward will take() it (counted by its forward).
  void add_reader();
  // The input as the forward made it: made on the first call, under NoGradGuard.
  at::Tensor take();

 private:
  std::mutex mutex_;  // backward may run on an autograd worker thread
  std::vector<at::Tensor> sources_;
  std::vector<int64_t> versions_;
  Make make_;
  at::Tensor made_;
  int readers_ = 0, taken_ = 0;
};

// Y = X Wᵀ for 2-D x (M x K) and w (N x K) under `state`'s plan, differentiable in x and w.
// With plan.dge (dge.h) dW is multiplied by the estimator's derivative at W; with plan.occ
// (occ.h) X is clamped before quantization and the residual compensated. A plan that breaks
// check_dge/check_occ (plan_rules.h) is refused with std::invalid_argument, here and in MXLinear.
// `rebuilt` (optional): x as the backward can make it again (its values, any shape of M·K
// elements); where dW is wanted Wgrad's X operand is then quantized from it in the backward
// instead of being kept, with the same bits (not under OCC, whose clamped X and residual the
// layer keeps).
at::Tensor mx_linear(const at::Tensor& x, const at::Tensor& w,
                     const std::shared_ptr<const LinearState>& state,
                     std::shared_ptr<RebuiltInput> rebuilt = nullptr);

// Quantizations a fused producer may make ahead of a layer (docs/design.md §4, "Quantization in
// the producers"): of its input X (Fprop's X along rows; Wgrad's X down columns when dW is
// wanted) or of its output's gradient dY (Dgrad's dY along rows when dX is wanted; Wgrad's dY
// down columns when dW is wanted), each with the layer's own spec and random key. Only those the
// layer would otherwise quantize itself on the emulated engine with no telemetry wanted this
// step: not plain BF16 roundings, not OCC's clamped X, not another engine's forms.
struct MadeAhead {
  std::optional<kernels::AxisQuantization> rows, cols;
  bool any() const { return rows.has_value() || cols.has_value(); }
  kernels::ProducedAxes axes() const { return {rows ? &*rows : nullptr, cols ? &*cols : nullptr}; }
};

MadeAhead input_made_ahead(const LinearState& s, bool want_dw);
MadeAhead output_grad_made_ahead(const LinearState& s, bool want_dx, bool want_dw);

// Puts a producer's results where the layer that asked for them takes them
// (QuantSession::made_ahead), under `produced` as the layer will see it (a 2-D view).
void offer_made_ahead(QuantSession& session, const at::Tensor& produced, const MadeAhead& asked,
                      const kernels::Produced& made);

class MXLinearImpl : public torch::nn::Module {
 public:
  // The weight is created uninitialized (the model initializes it) on `device`.
  MXLinearImpl(int64_t in_features, int64_t out_features, int layer, const LinearPlan& plan,
               std::shared_ptr<QuantSession> session, at::Device device = at::kCPU);
  // x: (…, in_features) -> (…, out_features); `rebuilt`: x as the backward can make it again
  // (mx_linear).
  at::Tensor forward(const at::Tensor& x, std::shared_ptr<RebuiltInput> rebuilt = nullptr);

  const LinearPlan& plan() const { return state_->plan; }
  // A new plan for the next forward; autograd nodes of earlier forwards keep the plan they ran.
  void set_plan(const LinearPlan& plan);
  int layer() const { return state_->layer; }
  // The layer's identity and current plan, as mx_linear() takes them (the chunked loss runs the
  // LM head's GEMMs with the state its forward found).
  std::shared_ptr<const LinearState> state() const { return state_; }
  int64_t in_features() const { return weight.size(1); }
  int64_t out_features() const { return weight.size(0); }

  at::Tensor weight;  // (out_features, in_features), float32 master weights

 private:
  std::shared_ptr<LinearState> state_;
};
TORCH_MODULE(MXLinear);

}  // namespace mxablate::trainer
