#include "mxablate/trainer/numerics/mx_linear.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/autograd.h>
#include <torch/utils.h>

#include <algorithm>
#include <optional>
#include <tuple>
#include <utility>

#include "mxablate/kernels/torch/fake_quantize.h"
#include "mxablate/kernels/torch/fused_ops.h"
#include "mxablate/trainer/numerics/dge.h"
#include "mxablate/trainer/numerics/occ.h"
#include "mxablate/trainer/numerics/telemetry_setting.h"
#include "mxablate/trainer/numerics/weight_gradient.h"
#include "mxablate/trainer/plan/plan_rules.h"

namespace mxablate::trainer {

using kernels::Axis;
using kernels::GemmKind;
using kernels::Operand;
using kernels::QuantSpec;
using kernels::QuantTelemetry;

void QuantSession::record(int layer, GemmKind gemm, Operand operand, const QuantTelemetry& t,
                          std::optional<double> occ_fraction) {
  std::lock_guard<std::mutex> lock(mutex_);
  records_.push_back({layer, gemm, operand, t, occ_fraction});
}

const at::Tensor* QuantSession::mxfp4_as_fp8_tile_counters(GemmKind gemm, const at::Device& device) {
  if (!count_route_calls) return nullptr;
  std::lock_guard<std::mutex> lock(mutex_);  // backward may run on an autograd worker thread
  if (!route_tiles_.defined()) {
    route_tiles_ = at::zeros({3, 2}, at::TensorOptions().dtype(at::kLong).device(device));
    for (size_t g = 0; g < route_tile_rows_.size(); ++g) route_tile_rows_[g] = route_tiles_[static_cast<int64_t>(g)];
  }
  return &route_tile_rows_[static_cast<size_t>(gemm)];
}

std::array<RouteTiles, 3> QuantSession::mxfp4_as_fp8_tiles() const {
  std::array<RouteTiles, 3> out{};
  if (!route_tiles_.defined()) return out;
  const at::Tensor host = route_tiles_.cpu();
  const int64_t* t = host.data_ptr<int64_t>();
  for (size_t g = 0; g < out.size(); ++g) out[g] = {t[2 * g], t[2 * g + 1]};
  return out;
}

std::vector<QuantSession::Record> QuantSession::take_records() {
  std::vector<Record> out;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    out = std::exchange(records_, {});
  }
  // In (layer, GEMM, operand) order, whatever order they were made in: with activation
  // checkpointing a block's forward quantizations are recorded during the backward pass.
  std::stable_sort(out.begin(), out.end(), [](const Record& a, const Record& b) {
    return std::tie(a.layer, a.gemm, a.operand) < std::tie(b.layer, b.gemm, b.operand);
  });
  return out;
}

LinearState::LinearState(int layer_index, LinearPlan linear_plan, std::shared_ptr<QuantSession> quant_session)
    : layer(layer_index), plan(std::move(linear_plan)), session(std::move(quant_session)) {
  // The one place a GEMM's engine is chosen (docs/design.md §3): its precision's route for GEMMs
  // of this kind (contract::route_of), unless that engine cannot take both operand formats.
  static const contract::GemmRoutes kEmulatedEverywhere;
  const contract::GemmRoutes& routes = session ? session->routes : kEmulatedEverywhere;
  for (GemmKind g : {GemmKind::kFprop, GemmKind::kDgrad, GemmKind::kWgrad}) {
    const GemmPlan& gp = plan[g];
    const kernels::GemmEngine& routed = kernels::gemm_engine(contract::route_of(routes, gp.precision, g));
    const bool takes = routed.operand_problem(gp.operand[0], gp.operand[1]).empty();
    engines_[static_cast<size_t>(g)] = takes ? &routed : &kernels::gemm_engine(kernels::GemmRoute::kEmulated);
  }
}

kernels::RngKey LinearState::key(GemmKind gemm, Operand operand) const {
  // With 2-D weight blocks, W in Fprop and Wᵀ in Dgrad are one quantization (docs/design.md §3):
  // one random stream, so that stochastic rounding gives them the same values too.
  const auto tiled = [this](GemmKind g) {
    return plan[g].operand[static_cast<size_t>(Operand::kB)].blocks == kernels::BlockShape::k2D;
  };
  if (gemm == GemmKind::kDgrad && operand == Operand::kB && tiled(GemmKind::kDgrad) &&
      tiled(GemmKind::kFprop))
    gemm = GemmKind::kFprop;
  return kernels::RngKey{session->seed, session->step, static_cast<uint32_t>(layer), gemm, operand,
                         session->device_step};
}

namespace {

// Which operand of which GEMM a quantization is for: enough to find its spec, axis and key.
struct OperandUse {
  GemmKind gemm;
  Operand operand;
};

const QuantSpec& spec_of(const LinearState& s, OperandUse u) {
  return s.plan[u.gemm].operand[static_cast<size_t>(u.operand)];
}

// GEMM operands on CUDA are BF16 (exact for every quantized value; the rounding itself for
// plain BF16); on the CPU float32 holding the same values. The quantizers write this dtype
// directly: converting afterwards would be another pass over every operand.
at::ScalarType gemm_dtype(const at::Tensor& t) { return t.is_cuda() ? at::kBFloat16 : at::kFloat; }

// Plain BF16 rounding (round to nearest even; NaN stays NaN). On the CPU the result stays
// float32, computed in one pass: LibTorch's to(bf16).to(float) makes two, and on the LM head's
// gradient (tokens x vocabulary) that was a large share of a smoke-model step.
at::Tensor round_to_bf16(const at::Tensor& t) {
  if (t.is_cuda()) return t.to(at::kBFloat16);  // the tensor itself when it is BF16 already
  const at::Tensor src = t.to(at::kFloat).contiguous();
  at::Tensor out = at::empty_like(src);
  const auto* in = reinterpret_cast<const uint32_t*>(src.data_ptr<float>());
  auto* o = reinterpret_cast<uint32_t*>(out.data_ptr<float>());
  at::parallel_for(0, src.numel(), 1 << 15, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const uint32_t u = in[i];
      const bool nan = (u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu) != 0;
      o[i] = nan ? 0x7FC00000u : (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
    }
  });
  return out;
}

bool wants_telemetry(const LinearState& s, const QuantSpec& spec) {
  return s.session->collect_telemetry && is_low_precision(spec);
}

// An FP8 operand under delayed scaling (docs/design.md §3): its scale is its own instance's, so
// its quantization is this layer's alone.
bool delayed_fp8(const LinearState& s, const QuantSpec& spec) {
  return s.session && s.session->fp8_history &&
         (spec.format == kernels::QuantFormat::kFP8E4M3 || spec.format == kernels::QuantFormat::kFP8E5M2);
}

// One tensor's quantizations for the GEMMs that use it (at most one along rows, one down
// columns), each by its GEMM's engine, in the form that engine multiplies.
struct Quantized {
  kernels::QuantizedOperand rows, cols;
};

// The uses of t that reach an engine's quantizer (neither plain BF16 nor found in the memo): two
// on one engine go in one call, i.e. one pass over t where the route allows (fake_quantize_both,
// fp8_quantize with rows and columns); uses on two engines, one call each.
void quantize_on_engines(const at::Tensor& t, const LinearState& s, std::optional<OperandUse> rows,
                         std::optional<OperandUse> cols, Quantized& out, QuantTelemetry& rows_tel,
                         QuantTelemetry& cols_tel) {
  const auto axis_q = [&s](OperandUse u) {
    kernels::AxisQuantization q{spec_of(s, u), s.key(u.gemm, u.operand), {}};
    if (delayed_fp8(s, q.spec)) q.delayed = s.session->fp8_history->scale_of(s.layer, u.gemm, u.operand);
    return q;
  };
  const auto telemetry = [&s](std::optional<OperandUse> u, QuantTelemetry& tel) {
    return u && wants_telemetry(s, spec_of(s, *u)) ? &tel : nullptr;
  };
  std::optional<kernels::AxisQuantization> rq, cq;
  if (rows) rq = axis_q(*rows);
  if (cols) cq = axis_q(*cols);
  const at::ScalarType dtype = gemm_dtype(t);
  if (rows && cols && &s.engine(rows->gemm) == &s.engine(cols->gemm)) {
    kernels::QuantizedAxes both = s.engine(rows->gemm).quantize(t, &*rq, &*cq, telemetry(rows, rows_tel),
                                                                telemetry(cols, cols_tel), dtype);
    out.rows = std::move(both.rows);
    out.cols = std::move(both.cols);
    return;
  }
  if (rows)
    out.rows = s.engine(rows->gemm).quantize(t, &*rq, nullptr, telemetry(rows, rows_tel), nullptr, dtype).rows;
  if (cols)
    out.cols = s.engine(cols->gemm).quantize(t, nullptr, &*cq, nullptr, telemetry(cols, cols_tel), dtype).cols;
}

// The operands of t for the given uses, with telemetry recorded for this layer.
// The GEMM's product on its engine; the mxfp4-as-fp8 engine counts its tiles each way on the
// device.
at::Tensor multiply(const LinearState& s, GemmKind gemm, const kernels::QuantizedOperand& a,
                    const kernels::QuantizedOperand& b) {
  const kernels::GemmEngine& engine = s.engine(gemm);
  const at::Tensor* tiles = engine.route() == kernels::GemmRoute::kMXFP4AsFP8 && s.session
                                ? s.session->mxfp4_as_fp8_tile_counters(gemm, a.data.device())
                                : nullptr;
  return engine.multiply(a, b, std::nullopt, tiles);
}

// Plain BF16 operands (only the emulated engine takes them) skip the quantizer: round_to_bf16,
// one rounding shared by both uses when both are plain.
// `rows_occ_fraction` goes with the rows use's telemetry record (Fprop's X under OCC).
// Where results of a tensor may be found and kept (quant_memo.h), and for which epoch: the
// session's memo and the step for a layer input that other layers quantize alike (q, k, v; gate,
// up); the layer's weight memo and the session's weight epoch for its weight.
struct MemoUse {
  QuantMemo* memo = nullptr;
  uint64_t epoch = 0;
  // X and dY: first look for what a fused producer made ahead for this layer (made_ahead_use).
  bool made_ahead = false;
};

// `memo`: a reused result is still recorded for this layer.
Quantized quantize_uses(const at::Tensor& t, const LinearState& s, std::optional<OperandUse> rows,
                        std::optional<OperandUse> cols,
                        std::optional<double> rows_occ_fraction = std::nullopt, MemoUse memo_use = {}) {
  QuantMemo* memo = memo_use.memo;
  const uint64_t epoch = memo_use.epoch;
  const at::ScalarType dtype = gemm_dtype(t);
  // Every engine's form goes through the memo: dequantized values (plain BF16 roundings
  // included), FP8 codes with their decode scale, E4M3 codes with chunk scales. The session's
  // memo serves several layers, so an operand under delayed scaling (its own instance's scale,
  // its own amax record) stays out of it; a layer's own weight memo keeps it for the step.
  const bool across_layers = memo == &s.session->memo;
  const auto memoized = [&](std::optional<OperandUse> u) {
    return memo && u && !(across_layers && delayed_fp8(s, spec_of(s, *u)));
  };
  const auto find = [&](std::optional<OperandUse> u, Axis axis) -> std::optional<QuantMemo::Result> {
    if (!u) return std::nullopt;
    const QuantSpec& spec = spec_of(s, *u);
    const kernels::QuantizedOperand::Form form = s.engine(u->gemm).form();
    // Only where producers may have made something: otherwise every lookup would lock a memo
    // that is always empty.
    if (memo_use.made_ahead && s.session && s.session->fused_producers) {
      std::optional<QuantMemo::Result> made =
          s.session->made_ahead.take(s.session->step, t, axis, spec, form, dtype, wants_telemetry(s, spec));
      if (made) return made;
    }
    if (!memoized(u)) return std::nullopt;
    return memo->find(epoch, t, axis, spec, form, dtype, wants_telemetry(s, spec));
  };
  const std::optional<QuantMemo::Result> rows_hit = find(rows, Axis::kRows);
  const std::optional<QuantMemo::Result> cols_hit = find(cols, Axis::kCols);
  const auto values = [&s](const at::Tensor& q, OperandUse u, Axis axis) {
    return kernels::QuantizedOperand::values(q, axis, spec_of(s, u), s.key(u.gemm, u.operand));
  };

  Quantized out;
  QuantTelemetry rows_tel, cols_tel;
  // What is left after the memo: plain BF16 rounded here, the rest on the engines.
  const std::optional<OperandUse> rows_left = rows_hit ? std::nullopt : rows;
  const std::optional<OperandUse> cols_left = cols_hit ? std::nullopt : cols;
  const bool rows_plain = rows_left && is_plain_bf16(spec_of(s, *rows_left));
  const bool cols_plain = cols_left && is_plain_bf16(spec_of(s, *cols_left));
  if (rows_plain && cols_plain) {
    const at::Tensor rounded = round_to_bf16(t);  // the same values serve both GEMMs
    out.rows = values(rounded, *rows_left, Axis::kRows);
    out.cols = values(rounded, *cols_left, Axis::kCols);
  } else {
    if (rows_plain) out.rows = values(round_to_bf16(t), *rows_left, Axis::kRows);
    if (cols_plain) out.cols = values(round_to_bf16(t), *cols_left, Axis::kCols);
    quantize_on_engines(t, s, rows_plain ? std::nullopt : rows_left, cols_plain ? std::nullopt : cols_left, out,
                        rows_tel, cols_tel);
  }

  const auto settle = [&](std::optional<OperandUse> u, Axis axis, const std::optional<QuantMemo::Result>& hit,
                          kernels::QuantizedOperand& op, QuantTelemetry& tel) {
    if (!u) return;
    if (hit) {
      if (hit->telemetry) tel = *hit->telemetry;
      op = hit->operand;  // the same values or codes, as this layer's operand
      op.spec = spec_of(s, *u);
      op.key = s.key(u->gemm, u->operand);
      return;
    }
    if (memoized(u)) {
      const QuantSpec& spec = spec_of(s, *u);
      memo->store(epoch, t, axis, spec, s.engine(u->gemm).form(), dtype,
                  {op, wants_telemetry(s, spec) ? std::optional<QuantTelemetry>(tel) : std::nullopt});
    }
  };
  settle(rows, Axis::kRows, rows_hit, out.rows, rows_tel);
  settle(cols, Axis::kCols, cols_hit, out.cols, cols_tel);
  if (rows && wants_telemetry(s, spec_of(s, *rows)))
    s.session->record(s.layer, rows->gemm, rows->operand, rows_tel, rows_occ_fraction);
  if (cols && wants_telemetry(s, spec_of(s, *cols)))
    s.session->record(s.layer, cols->gemm, cols->operand, cols_tel);
  return out;
}

// BF16 values as float32, for the OCC residual's products (they run in float32; products of BF16
// values are exact in it, so this is BF16 multiplication with FP32 accumulation).
at::Tensor bf16_values(const at::Tensor& t) { return round_to_bf16(t).to(at::kFloat); }

// Refuses a plan whose DGE or OCC settings cannot work (plan_rules.h: the planner's rule too).
void require_usable(const LinearPlan& plan) {
  for (const std::string& why : {check_dge(plan), check_occ(plan)})
    if (!why.empty()) throw std::invalid_argument(why);
}

// What backward needs, as one object. Autograd keeps its tensors (save_for_backward: freed once
// backward has run, and checked against in-place changes); a capsule keeps the rest.
struct Saved {
  bool want_dx = false, want_dw = false;
  // Autograd wants each gradient in its input's dtype: dX in x's (BF16 or float32), dW in the
  // float32 master weight's.
  at::ScalarType x_dtype = at::kFloat, w_dtype = at::kFloat;
  // Wgrad's X operand (X down columns, clamped under OCC) and Dgrad's W operand (W down
  // columns), in their engines' forms: dequantized values, or FP8 codes and scales (one byte per
  // element).
  kernels::QuantizedOperand x_for_wgrad, w_for_dgrad;
  // DGE: W itself (the parameter: nothing is copied), whose scales backward recomputes.
  at::Tensor w_for_dge;
  // OCC: the residual's non-zeros (a small share of X).
  OccResidual residual;
  // Selective recompute: X made again for Wgrad (x_for_wgrad is then made in the backward), its
  // shape, and whether the forward collected telemetry (the backward's quantization records it
  // as the forward's would have).
  std::shared_ptr<RebuiltInput> rebuilt_x;
  std::vector<int64_t> x_sizes;
  bool collect_telemetry = false;
  // A BF16 working copy's sink (weight_gradient.h): dW goes there in float32, not to autograd.
  std::shared_ptr<const WeightGradientSink> weight_sink;
};

// The LinearState and a Saved without its tensors, in autograd's saved data (IValues only).
struct SavedCapsule : torch::CustomClassHolder {
  SavedCapsule(std::shared_ptr<const LinearState> s, Saved v) : state(std::move(s)), saved(std::move(v)) {}
  std::shared_ptr<const LinearState> state;
  Saved saved;
};

void save(torch::autograd::AutogradContext* ctx, std::shared_ptr<const LinearState> state, Saved saved) {
  ctx->save_for_backward({saved.x_for_wgrad.data, saved.x_for_wgrad.scale, saved.w_for_dgrad.data,
                          saved.w_for_dgrad.scale, saved.w_for_dge, saved.residual.indices,
                          saved.residual.values});
  for (kernels::QuantizedOperand* op : {&saved.x_for_wgrad, &saved.w_for_dgrad}) {
    op->data = at::Tensor();
    op->scale = at::Tensor();
  }
  saved.w_for_dge = at::Tensor();
  saved.residual.indices = at::Tensor();
  saved.residual.values = at::Tensor();
  ctx->saved_data["saved"] =
      c10::IValue::make_capsule(c10::make_intrusive<SavedCapsule>(std::move(state), std::move(saved)));
}

// save's inverse: the state and the Saved with its tensors back in place.
std::pair<std::shared_ptr<const LinearState>, Saved> restore(torch::autograd::AutogradContext* ctx) {
  const auto capsule = c10::static_intrusive_pointer_cast<SavedCapsule>(ctx->saved_data["saved"].toCapsule());
  Saved saved = capsule->saved;
  const auto tensors = ctx->get_saved_variables();
  saved.x_for_wgrad.data = tensors[0];
  saved.x_for_wgrad.scale = tensors[1];
  saved.w_for_dgrad.data = tensors[2];
  saved.w_for_dgrad.scale = tensors[3];
  saved.w_for_dge = tensors[4];
  saved.residual.indices = tensors[5];
  saved.residual.values = tensors[6];
  return {capsule->state, std::move(saved)};
}

std::optional<OperandUse> use_if(bool wanted, GemmKind g, Operand o) {
  return wanted ? std::optional<OperandUse>(OperandUse{g, o}) : std::nullopt;
}

class MXLinearFunction : public torch::autograd::Function<MXLinearFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& w, std::shared_ptr<const LinearState> state,
                            bool grad_enabled, std::shared_ptr<RebuiltInput> rebuilt) {
    // apply() runs forward with grad mode off, so the caller's mode arrives as an argument:
    // evaluation under NoGradGuard skips the column-wise quantizations backward would need.
    const LinearState& s = *state;
    Saved saved;
    saved.want_dx = grad_enabled && x.requires_grad();
    saved.want_dw = grad_enabled && w.requires_grad();
    saved.x_dtype = x.scalar_type();
    saved.w_dtype = w.scalar_type();
    // Only a weight that is not float32 can be a working copy: the others need no lookup.
    if (saved.want_dw && saved.w_dtype != at::kFloat) saved.weight_sink = weight_gradient_sink(w);

    // OCC: Fprop and Wgrad quantize X clamped at the quantile (docs/design.md §4).
    std::optional<OccSplit> occ;
    if (s.plan.occ) occ = occ_split(x, s.plan.occ->quantile);
    const at::Tensor& xq = occ ? occ->clamped : x;
    const std::optional<double> occ_fraction =
        occ ? std::optional<double>(occ->residual.fraction()) : std::nullopt;
    // X along rows for Fprop and, when dW will be wanted, down columns for Wgrad; W along rows
    // for Fprop and, when dX will be wanted, down columns for Dgrad: each tensor in one pass where
    // its two GEMMs share an engine. Backward keeps the column-wise ones. An X the backward makes
    // again (selective recompute) is quantized for Wgrad there instead.
    const bool rebuild_x = rebuilt && saved.want_dw && !occ;
    Quantized qx = quantize_uses(xq, s, OperandUse{GemmKind::kFprop, Operand::kA},
                                 use_if(saved.want_dw && !rebuild_x, GemmKind::kWgrad, Operand::kB),
                                 occ_fraction, {&s.session->memo, s.session->step, /*made_ahead=*/!occ});
    if (rebuild_x) {
      rebuilt->add_reader();
      saved.rebuilt_x = std::move(rebuilt);
      saved.x_sizes = x.sizes().vec();
      saved.collect_telemetry = s.session->collect_telemetry;
    }
    // W's operands are the same bits for every micro-batch and recompute of a step. Where both of
    // W's GEMMs take it plain BF16, Dgrad's operand is the very tensor Fprop's rounding makes, so
    // with the weight cache on it is asked for even where this pass wants no dX (a checkpointed
    // block's first forward): it costs nothing here and spares the recompute a second rounding
    // and a second copy (the cache's size counts one, docs/design.md §4).
    const OperandUse fprop_w{GemmKind::kFprop, Operand::kB}, dgrad_w{GemmKind::kDgrad, Operand::kB};
    const bool cached = s.session->cache_weight_operands;
    const bool share_rounding = cached && weight_shares_rounding(s.plan);
    Quantized qw =
        quantize_uses(w, s, fprop_w, use_if(saved.want_dx || share_rounding, dgrad_w.gemm, dgrad_w.operand),
                      std::nullopt, cached ? MemoUse{s.weight_memo.get(), s.session->weight_epoch()} : MemoUse{});
    // The GEMM's own result: BF16 on CUDA (no float32 copy of every linear output), float32 on
    // the CPU (docs/design.md §4). An OCC residual is added in float32 and makes y float32.
    at::Tensor y = multiply(s, GemmKind::kFprop, qx.rows, qw.rows);
    if (occ && occ->residual.nnz() > 0) y = y + occ->residual.times(bf16_values(w).t());

    saved.x_for_wgrad = std::move(qx.cols);
    if (saved.want_dx) saved.w_for_dgrad = std::move(qw.cols);
    if (saved.want_dw && s.plan.dge) saved.w_for_dge = w;
    if (saved.want_dw && occ && occ->residual.nnz() > 0) saved.residual = occ->residual;
    save(ctx, std::move(state), std::move(saved));
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto [state, saved] = restore(ctx);
    const LinearState& s = *state;
    // dY as it comes (BF16 on CUDA): the quantizers read BF16 directly, and plain-BF16 operands
    // that are BF16 already need no rounding pass. Along rows for Dgrad, down columns (dYᵀ) for
    // Wgrad, in one pass where both GEMMs share an engine.
    const at::Tensor dy = grads[0].contiguous();
    const Quantized qdy = quantize_uses(dy, s, use_if(saved.want_dx, GemmKind::kDgrad, Operand::kA),
                                        use_if(saved.want_dw, GemmKind::kWgrad, Operand::kA), std::nullopt,
                                        {nullptr, 0, /*made_ahead=*/true});
    kernels::QuantizedOperand x_for_wgrad = saved.x_for_wgrad;
    if (saved.rebuilt_x) x_for_wgrad = rebuilt_wgrad_operand(s, saved);
    at::Tensor dx, dw;
    if (saved.want_dx)  // Dgrad: dX = dY W, reducing over N
      dx = multiply(s, GemmKind::kDgrad, qdy.rows, saved.w_for_dgrad).to(saved.x_dtype);
    if (saved.want_dw) {  // Wgrad: dW = dYᵀ X, reducing over M (the tokens)
      // Converted once, to the master weight's dtype (float32: the vectorized widening; a
      // working copy's gradient is its float32 master's).
      dw = multiply(s, GemmKind::kWgrad, qdy.cols, x_for_wgrad);
      dw = saved.w_dtype == at::kFloat || saved.weight_sink ? kernels::to_float32(dw) : dw.to(saved.w_dtype);
      // DGE (docs/design.md §4): W reaches Y through Q(W), whose estimated derivative multiplies
      // this product; through the OCC residual's bf16(W) it passes straight (added after).
      if (s.plan.dge) {
        const OperandUse fprop_w{GemmKind::kFprop, Operand::kB};
        dw = dw * dge_weight_factor(saved.w_for_dge, spec_of(s, fprop_w),
                                    s.key(fprop_w.gemm, fprop_w.operand), *s.plan.dge);
      }
      if (saved.residual.nnz() > 0) dw = dw + saved.residual.transposed_times(bf16_values(dy)).t();
      if (saved.weight_sink) {
        give_weight_gradient(saved.weight_sink, dw);
        dw = at::Tensor();
      }
    }
    return {dx, dw, at::Tensor(), at::Tensor(), at::Tensor()};
  }

 private:
  // Wgrad's X operand from the input made again: the quantization the forward would have made
  // (same spec, key and telemetry setting), shared through the session's memo by the readers
  // of one input as in the forward.
  static kernels::QuantizedOperand rebuilt_wgrad_operand(const LinearState& s, const Saved& saved) {
    const at::Tensor made = saved.rebuilt_x->take();
    TORCH_CHECK(made.numel() == saved.x_sizes[0] * saved.x_sizes[1], "layer ", s.layer,
                ": the input made again has ", made.numel(), " elements, the forward's ", saved.x_sizes);
    const at::Tensor x = made.reshape(saved.x_sizes).contiguous();
    const TelemetrySetting telemetry(*s.session, saved.collect_telemetry);
    return quantize_uses(x, s, std::nullopt, OperandUse{GemmKind::kWgrad, Operand::kB}, std::nullopt,
                         {&s.session->memo, s.session->step})
        .cols;
  }
};

// The one rule for what a producer may make ahead of a layer (mx_linear.h, MadeAhead): a use
// the layer would quantize itself on the emulated engine, with its own spec and key.
std::optional<kernels::AxisQuantization> made_ahead_use(const LinearState& s, std::optional<OperandUse> u) {
  if (!u || !s.session) return std::nullopt;
  const QuantSpec& spec = spec_of(s, *u);
  if (!is_low_precision(spec) || wants_telemetry(s, spec) || delayed_fp8(s, spec) ||
      s.engine(u->gemm).form() != kernels::QuantizedOperand::Form::kValues)
    return std::nullopt;
  return kernels::AxisQuantization{spec, s.key(u->gemm, u->operand)};
}

}  // namespace

MadeAhead input_made_ahead(const LinearState& s, bool want_dw) {
  if (s.plan.occ) return {};  // OCC quantizes X clamped, which only the layer makes
  return {made_ahead_use(s, OperandUse{GemmKind::kFprop, Operand::kA}),
          made_ahead_use(s, use_if(want_dw, GemmKind::kWgrad, Operand::kB))};
}

MadeAhead output_grad_made_ahead(const LinearState& s, bool want_dx, bool want_dw) {
  return {made_ahead_use(s, use_if(want_dx, GemmKind::kDgrad, Operand::kA)),
          made_ahead_use(s, use_if(want_dw, GemmKind::kWgrad, Operand::kA))};
}

void offer_made_ahead(QuantSession& session, const at::Tensor& produced, const MadeAhead& asked,
                      const kernels::Produced& made) {
  // The layer sees its input (and its output's gradient) as a 2-D view of the same storage.
  const at::Tensor matrix = produced.reshape({-1, produced.size(-1)});
  const auto offer = [&](Axis axis, const std::optional<kernels::AxisQuantization>& q, const at::Tensor& values) {
    if (!q || !values.defined()) return;
    session.made_ahead.store(session.step, matrix, axis, q->spec, kernels::QuantizedOperand::Form::kValues,
                             values.scalar_type(),
                             {kernels::QuantizedOperand::values(values, axis, q->spec, q->key), std::nullopt});
  };
  offer(Axis::kRows, asked.rows, made.rows);
  offer(Axis::kCols, asked.cols, made.cols);
}

RebuiltInput::RebuiltInput(std::vector<at::Tensor> sources, Make make)
    : sources_(std::move(sources)), make_(std::move(make)) {
  for (const at::Tensor& t : sources_) versions_.push_back(t._version());
}

void RebuiltInput::add_reader() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++readers_;
}

at::Tensor RebuiltInput::take() {
  std::lock_guard<std::mutex> lock(mutex_);
  TORCH_CHECK(taken_ < readers_, "an input made again was taken more often than its ", readers_, " readers");
  if (!made_.defined()) {
    for (size_t i = 0; i < sources_.size(); ++i)
      TORCH_CHECK(sources_[i]._version() == versions_[i],
                  "an input to be made again in the backward was changed in place after the forward");
    const torch::NoGradGuard no_grad;
    made_ = make_(sources_);
  }
  const at::Tensor out = made_;
  if (++taken_ == readers_) {  // the last reader: nothing of it is kept any longer
    made_ = at::Tensor();
    sources_.clear();
    make_ = nullptr;
  }
  return out;
}

at::Tensor mx_linear(const at::Tensor& x, const at::Tensor& w,
                     const std::shared_ptr<const LinearState>& state, std::shared_ptr<RebuiltInput> rebuilt) {
  TORCH_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1),
              "mx_linear: expected x (M x K) and w (N x K), got ", x.sizes(), " and ", w.sizes());
  require_usable(state->plan);
  return MXLinearFunction::apply(x.contiguous(), w, state, at::GradMode::is_enabled(), std::move(rebuilt));
}

MXLinearImpl::MXLinearImpl(int64_t in_features, int64_t out_features, int layer,
                           const LinearPlan& plan, std::shared_ptr<QuantSession> session,
                           at::Device device)
    : state_(std::make_shared<LinearState>(LinearState{layer, plan, std::move(session)})) {
  require_usable(plan);
  weight = register_parameter(
      "weight", at::empty({out_features, in_features}, at::TensorOptions(at::kFloat).device(device)));
}

void MXLinearImpl::set_plan(const LinearPlan& plan) {
  state_ = std::make_shared<LinearState>(LinearState{state_->layer, plan, state_->session});
}

at::Tensor MXLinearImpl::forward(const at::Tensor& x, std::shared_ptr<RebuiltInput> rebuilt) {
  const int64_t k = x.size(-1);
  std::vector<int64_t> out_shape(x.sizes().begin(), x.sizes().end());
  out_shape.back() = weight.size(0);
  return mx_linear(x.reshape({-1, k}), weight, state_, std::move(rebuilt)).view(out_shape);
}

}  // namespace mxablate::trainer
