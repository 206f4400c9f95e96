#include "mxablate/trainer/mx_linear.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/autograd.h>

#include <algorithm>
#include <optional>
#include <tuple>
#include <utility>

#include "mxablate/kernels/torch/fake_quantize.h"
#include "mxablate/kernels/torch/fp8_gemm.h"
#include "mxablate/trainer/dge.h"
#include "mxablate/trainer/occ.h"
#include "mxablate/trainer/plan_rules.h"

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

// Q(t) for the given uses of t (at most one along rows, one down columns), in GEMM dtype.
// Both at once go through fake_quantize_both: one pass over memory on CUDA.
struct Quantized {
  at::Tensor rows, cols;
};

struct QuantizedWithTelemetry {
  Quantized q;
  QuantTelemetry rows_tel, cols_tel;
};

QuantizedWithTelemetry compute_uses(const at::Tensor& t, const LinearState& s,
                                    std::optional<OperandUse> rows, std::optional<OperandUse> cols) {
  QuantizedWithTelemetry out;
  const auto single = [&](OperandUse u, Axis axis, QuantTelemetry& tel) {
    const QuantSpec& spec = spec_of(s, u);
    if (is_plain_bf16(spec)) return round_to_bf16(t);
    return kernels::fake_quantize(t, axis, spec, s.key(u.gemm, u.operand),
                                  wants_telemetry(s, spec) ? &tel : nullptr, gemm_dtype(t));
  };
  if (rows && cols && !is_plain_bf16(spec_of(s, *rows)) && !is_plain_bf16(spec_of(s, *cols))) {
    const QuantSpec& rs = spec_of(s, *rows);
    const QuantSpec& cs = spec_of(s, *cols);
    kernels::BothAxes both = kernels::fake_quantize_both(
        t, {rs, s.key(rows->gemm, rows->operand)}, {cs, s.key(cols->gemm, cols->operand)},
        wants_telemetry(s, rs) ? &out.rows_tel : nullptr,
        wants_telemetry(s, cs) ? &out.cols_tel : nullptr, gemm_dtype(t));
    out.q.rows = both.rows;
    out.q.cols = both.cols;
  } else if (rows && cols && is_plain_bf16(spec_of(s, *rows)) && is_plain_bf16(spec_of(s, *cols))) {
    out.q.rows = round_to_bf16(t);  // the same values serve both GEMMs
    out.q.cols = out.q.rows;
  } else {
    if (rows) out.q.rows = single(*rows, Axis::kRows, out.rows_tel);
    if (cols) out.q.cols = single(*cols, Axis::kCols, out.cols_tel);
  }
  return out;
}

// `rows_occ_fraction` goes with the rows use's telemetry record (Fprop's X under OCC).
// `memoize`: t is a layer input that other layers may quantize alike in this step (q, k, v; gate,
// up): results whose spec does not depend on the random key go through the session's memo
// (quant_memo.h), and a reused one is still recorded for this layer.
Quantized quantize_uses(const at::Tensor& t, const LinearState& s, std::optional<OperandUse> rows,
                        std::optional<OperandUse> cols,
                        std::optional<double> rows_occ_fraction = std::nullopt,
                        bool memoize = false) {
  QuantMemo* memo = memoize ? &s.session->memo : nullptr;
  const uint32_t step = s.session->step;
  const at::ScalarType dtype = gemm_dtype(t);
  const auto find = [&](std::optional<OperandUse> u, Axis axis) -> std::optional<QuantMemo::Result> {
    if (!memo || !u) return std::nullopt;
    const QuantSpec& spec = spec_of(s, *u);
    return memo->find(step, t, axis, spec, dtype, wants_telemetry(s, spec));
  };
  const std::optional<QuantMemo::Result> rows_hit = find(rows, Axis::kRows);
  const std::optional<QuantMemo::Result> cols_hit = find(cols, Axis::kCols);
  const QuantizedWithTelemetry made =
      compute_uses(t, s, rows_hit ? std::nullopt : rows, cols_hit ? std::nullopt : cols);

  Quantized out;
  QuantTelemetry rows_tel = made.rows_tel, cols_tel = made.cols_tel;
  const auto settle = [&](std::optional<OperandUse> u, Axis axis,
                          const std::optional<QuantMemo::Result>& hit, const at::Tensor& value,
                          QuantTelemetry& tel) -> at::Tensor {
    if (!u) return at::Tensor();
    if (hit) {
      if (hit->telemetry) tel = *hit->telemetry;
      return hit->value;
    }
    if (memo) {
      const QuantSpec& spec = spec_of(s, *u);
      memo->store(step, t, axis, spec, dtype,
                  {value, wants_telemetry(s, spec) ? std::optional<QuantTelemetry>(tel)
                                                   : std::nullopt});
    }
    return value;
  };
  out.rows = settle(rows, Axis::kRows, rows_hit, made.q.rows, rows_tel);
  out.cols = settle(cols, Axis::kCols, cols_hit, made.q.cols, cols_tel);
  if (rows && wants_telemetry(s, spec_of(s, *rows)))
    s.session->record(s.layer, rows->gemm, rows->operand, rows_tel, rows_occ_fraction);
  if (cols && wants_telemetry(s, spec_of(s, *cols)))
    s.session->record(s.layer, cols->gemm, cols->operand, cols_tel);
  return out;
}

// 1 / (pa · pb) of GEMM g's operands: an SR pre-scale multiplied the quantized values, and the
// product is divided back (docs/design.md §3), as quantized_gemm does.
float emulated_fold(const LinearState& s, GemmKind g) {
  return kernels::sr_prescale_fold(s.plan[g].operand[0], s.plan[g].operand[1]);
}

// The Hopper FP8 path takes a GEMM when its precision is routed there and both its operands are
// MXFP4.
bool uses_hopper(const LinearState& s, GemmKind g) {
  if (s.session->routes.of(s.plan[g].precision) != contract::GemmRoute::kHopperFP8) return false;
  const auto& ops = s.plan[g].operand;
  return ops[0].format == kernels::QuantFormat::kMXFP4 && ops[1].format == kernels::QuantFormat::kMXFP4;
}

bool is_fp8(kernels::QuantFormat f) {
  return f == kernels::QuantFormat::kFP8E4M3 || f == kernels::QuantFormat::kFP8E5M2;
}

// FP8 tensor cores take a GEMM when its precision is routed there and both operands are
// per-tensor FP8 (E4M3 x E4M3 or one of them E5M2: the FP8 plan never pairs two gradients).
bool uses_fp8_tensorwise(const LinearState& s, GemmKind g) {
  if (s.session->routes.of(s.plan[g].precision) != contract::GemmRoute::kFP8Tensorwise) return false;
  const auto& ops = s.plan[g].operand;
  return is_fp8(ops[0].format) && is_fp8(ops[1].format) &&
         !(ops[0].format == kernels::QuantFormat::kFP8E5M2 && ops[1].format == kernels::QuantFormat::kFP8E5M2);
}

// The FP8 codes of t for the uses routed to FP8 tensor cores (at most one along rows, one down
// columns), in one pass over t; telemetry recorded as quantize_uses records it.
kernels::Fp8Codes fp8_codes_for(const at::Tensor& t, const LinearState& s, std::optional<OperandUse> rows,
                                std::optional<OperandUse> cols,
                                std::optional<double> rows_occ_fraction = std::nullopt) {
  if (!rows && !cols) return {};
  std::optional<kernels::AxisQuantization> rq, cq;
  if (rows) rq = kernels::AxisQuantization{spec_of(s, *rows), s.key(rows->gemm, rows->operand)};
  if (cols) cq = kernels::AxisQuantization{spec_of(s, *cols), s.key(cols->gemm, cols->operand)};
  const bool rows_tel = rq && wants_telemetry(s, rq->spec);
  const bool cols_tel = cq && wants_telemetry(s, cq->spec);
  QuantTelemetry rt, ct;
  kernels::Fp8Codes codes = kernels::fp8_quantize(t, rq ? &*rq : nullptr, cq ? &*cq : nullptr,
                                                  rows_tel ? &rt : nullptr, cols_tel ? &ct : nullptr);
  if (rows_tel) s.session->record(s.layer, rows->gemm, rows->operand, rt, rows_occ_fraction);
  if (cols_tel) s.session->record(s.layer, cols->gemm, cols->operand, ct);
  return codes;
}

// a (M x K) and b (N x K) FP8 codes on FP8 tensor cores, out in the GEMM dtype (BF16 on CUDA)
// like the emulated route;
// the SR pre-scales are divided back out as quantized_gemm does (docs/design.md §3).
at::Tensor fp8_tensorwise_gemm(const LinearState& s, GemmKind g, const at::Tensor& a, const at::Tensor& a_scale,
                               const at::Tensor& b, const at::Tensor& b_scale) {
  const auto& ops = s.plan[g].operand;
  return kernels::fp8_tensorwise_mm(a, a_scale, b, b_scale, gemm_dtype(a_scale), kernels::sr_prescale_fold(ops[0], ops[1]));
}

at::Tensor hopper_gemm(const LinearState& s, GemmKind g, const at::Tensor& a, const at::Tensor& b,
                       std::optional<double> a_occ_fraction = std::nullopt) {
  const auto& ops = s.plan[g].operand;
  const kernels::GemmOperand ga{a, operand_axis(g, Operand::kA), ops[0], s.key(g, Operand::kA)};
  const kernels::GemmOperand gb{b, operand_axis(g, Operand::kB), ops[1], s.key(g, Operand::kB)};
  kernels::GemmReport report;
  const bool collect = s.session->collect_telemetry;
  at::Tensor c = kernels::quantized_gemm(ga, gb, kernels::GemmPath::kHopperFP8,
                                         collect ? &report : nullptr);
  if (collect) {
    s.session->record(s.layer, g, Operand::kA, report.a, a_occ_fraction);
    s.session->record(s.layer, g, Operand::kB, report.b);
  }
  return c.to(at::kFloat);
}

// BF16 values as float32, for the OCC residual's products (they run in float32; products of BF16
// values are exact in it, so this is BF16 multiplication with FP32 accumulation).
at::Tensor bf16_values(const at::Tensor& t) { return round_to_bf16(t).to(at::kFloat); }

// Refuses a plan whose DGE or OCC settings cannot work (plan_rules.h: the planner's rule too).
void require_usable(const LinearPlan& plan) {
  for (const std::string& why : {check_dge(plan), check_occ(plan)})
    if (!why.empty()) throw std::invalid_argument(why);
}

// Carries the LinearState through autograd's saved data (which holds only IValues).
struct StateCapsule : torch::CustomClassHolder {
  explicit StateCapsule(std::shared_ptr<const LinearState> s) : state(std::move(s)) {}
  std::shared_ptr<const LinearState> state;
};

class MXLinearFunction : public torch::autograd::Function<MXLinearFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& w, std::shared_ptr<const LinearState> state,
                            bool grad_enabled) {
    // apply() runs forward with grad mode off, so the caller's mode arrives as an argument:
    // evaluation under NoGradGuard skips the column-wise quantizations backward would need.
    const LinearState& s = *state;
    const bool want_dx = grad_enabled && x.requires_grad();
    const bool want_dw = grad_enabled && w.requires_grad();
    const bool hopper_f = uses_hopper(s, GemmKind::kFprop);
    const bool hopper_d = uses_hopper(s, GemmKind::kDgrad);
    const bool hopper_w = uses_hopper(s, GemmKind::kWgrad);
    const bool fp8_f = uses_fp8_tensorwise(s, GemmKind::kFprop);
    const bool fp8_d = uses_fp8_tensorwise(s, GemmKind::kDgrad);
    const bool fp8_w = uses_fp8_tensorwise(s, GemmKind::kWgrad);

    // Quantize X and W for Fprop and, when a gradient will be wanted, for Wgrad (X down
    // columns) and Dgrad (W down columns) now, in one pass each; backward keeps only those.
    const auto use = [](bool wanted, GemmKind g, Operand o) {
      return wanted ? std::optional<OperandUse>(OperandUse{g, o}) : std::nullopt;
    };
    const bool x_cols = want_dw && !hopper_w && !fp8_w;
    const bool w_cols = want_dx && !hopper_d && !fp8_d;
    const bool emulated_f = !hopper_f && !fp8_f;
    // OCC: Fprop and Wgrad quantize X clamped at the quantile (docs/design.md §4).
    std::optional<OccSplit> occ;
    if (s.plan.occ) occ = occ_split(x, s.plan.occ->quantile);
    const at::Tensor& xq = occ ? occ->clamped : x;
    const std::optional<double> occ_fraction =
        occ ? std::optional<double>(occ->residual.fraction()) : std::nullopt;
    const Quantized qx = quantize_uses(xq, s, use(emulated_f, GemmKind::kFprop, Operand::kA),
                                       use(x_cols, GemmKind::kWgrad, Operand::kB), occ_fraction,
                                       /*memoize=*/true);
    const Quantized qw = quantize_uses(w, s, use(emulated_f, GemmKind::kFprop, Operand::kB),
                                       use(w_cols, GemmKind::kDgrad, Operand::kB));
    // FP8 tensor cores: X's codes along rows (Fprop) and down columns (Wgrad), W's along rows
    // (Fprop) and down columns (Dgrad), each tensor's in one pass; backward keeps the codes.
    const kernels::Fp8Codes cx = fp8_codes_for(xq, s, use(fp8_f, GemmKind::kFprop, Operand::kA),
                                               use(want_dw && fp8_w, GemmKind::kWgrad, Operand::kB), occ_fraction);
    const kernels::Fp8Codes cw = fp8_codes_for(w, s, use(fp8_f, GemmKind::kFprop, Operand::kB),
                                               use(want_dx && fp8_d, GemmKind::kDgrad, Operand::kB));
    // The GEMM's own result: BF16 on CUDA (no float32 copy of every linear output), float32 on
    // the CPU (docs/design.md §4). An OCC residual is added in float32 and makes y float32.
    at::Tensor y = hopper_f ? hopper_gemm(s, GemmKind::kFprop, xq, w, occ_fraction)
                   : fp8_f  ? fp8_tensorwise_gemm(s, GemmKind::kFprop, cx.rows, cx.rows_scale, cw.rows, cw.rows_scale)
                            : kernels::folded_mm(qx.rows, qw.rows.t(), emulated_fold(s, GemmKind::kFprop));
    if (occ && occ->residual.nnz() > 0) y = y + occ->residual.times(bf16_values(w).t());

    ctx->saved_data["state"] = c10::IValue::make_capsule(c10::make_intrusive<StateCapsule>(state));
    ctx->saved_data["want_dx"] = want_dx;
    ctx->saved_data["want_dw"] = want_dw;
    // Autograd wants each gradient in its input's dtype: dX in x's (BF16 or float32), dW in the
    // float32 master weight's.
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["w_dtype"] = static_cast<int64_t>(w.scalar_type());
    // Saved for Wgrad: Q(X) down columns, X's FP8 codes down columns and their scale (FP8 tensor
    // cores: one byte per element), or X itself for the Hopper path (clamped under OCC); for
    // Dgrad likewise W. Under OCC the residual's non-zeros (a small share of X); under DGE W
    // itself (the parameter: nothing is copied), whose scales backward recomputes.
    const bool keep_residual = want_dw && occ && occ->residual.nnz() > 0;
    ctx->saved_data["occ_rows"] = keep_residual ? occ->residual.rows : int64_t{0};
    ctx->saved_data["occ_cols"] = keep_residual ? occ->residual.cols : int64_t{0};
    const at::Tensor x_saved = !want_dw ? at::Tensor() : fp8_w ? cx.cols : x_cols ? qx.cols : xq;
    const at::Tensor w_saved = !want_dx ? at::Tensor() : fp8_d ? cw.cols : w_cols ? qw.cols : w;
    ctx->save_for_backward({x_saved, w_saved,
                            want_dw && s.plan.dge ? w : at::Tensor(),
                            keep_residual ? occ->residual.indices : at::Tensor(),
                            keep_residual ? occ->residual.values : at::Tensor(),
                            want_dw && fp8_w ? cx.cols_scale : at::Tensor(),
                            want_dx && fp8_d ? cw.cols_scale : at::Tensor()});
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto capsule = c10::static_intrusive_pointer_cast<StateCapsule>(
        ctx->saved_data["state"].toCapsule());
    const LinearState& s = *capsule->state;
    const bool want_dx = ctx->saved_data["want_dx"].toBool();
    const bool want_dw = ctx->saved_data["want_dw"].toBool();
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x_for_wgrad = saved[0];
    const at::Tensor& w_for_dgrad = saved[1];
    const at::Tensor& w_for_dge = saved[2];
    OccResidual residual{saved[3], saved[4], ctx->saved_data["occ_rows"].toInt(),
                         ctx->saved_data["occ_cols"].toInt()};
    const auto x_dtype = static_cast<at::ScalarType>(ctx->saved_data["x_dtype"].toInt());
    const auto w_dtype = static_cast<at::ScalarType>(ctx->saved_data["w_dtype"].toInt());
    const at::Tensor& x_scale = saved[5];  // FP8 tensor cores: the decode scale of x_for_wgrad
    const at::Tensor& w_scale = saved[6];  // and of w_for_dgrad
    // dY as it comes (BF16 on CUDA): the quantizers read BF16 directly, and plain-BF16 operands
    // that are BF16 already need no rounding pass.
    const at::Tensor dy = grads[0].contiguous();
    const bool hopper_d = uses_hopper(s, GemmKind::kDgrad);
    const bool hopper_w = uses_hopper(s, GemmKind::kWgrad);
    const bool fp8_d = uses_fp8_tensorwise(s, GemmKind::kDgrad);
    const bool fp8_w = uses_fp8_tensorwise(s, GemmKind::kWgrad);

    const auto use = [](bool wanted, GemmKind g) {
      return wanted ? std::optional<OperandUse>(OperandUse{g, Operand::kA}) : std::nullopt;
    };
    const Quantized qdy = quantize_uses(dy, s, use(want_dx && !hopper_d && !fp8_d, GemmKind::kDgrad),
                                        use(want_dw && !hopper_w && !fp8_w, GemmKind::kWgrad));
    // dY's codes along rows (Dgrad) and down columns (dYᵀ, Wgrad) in one pass.
    const kernels::Fp8Codes cdy =
        fp8_codes_for(dy, s, use(want_dx && fp8_d, GemmKind::kDgrad), use(want_dw && fp8_w, GemmKind::kWgrad));
    at::Tensor dx, dw;
    if (want_dx) {  // Dgrad: dX = dY W, reducing over N
      dx = hopper_d ? hopper_gemm(s, GemmKind::kDgrad, dy, w_for_dgrad)
           : fp8_d  ? fp8_tensorwise_gemm(s, GemmKind::kDgrad, cdy.rows, cdy.rows_scale, w_for_dgrad, w_scale)
                    : kernels::folded_mm(qdy.rows, w_for_dgrad, emulated_fold(s, GemmKind::kDgrad));
      dx = dx.to(x_dtype);
    }
    if (want_dw) {  // Wgrad: dW = dYᵀ X, reducing over M (the tokens)
      dw = hopper_w ? hopper_gemm(s, GemmKind::kWgrad, dy, x_for_wgrad)
           : fp8_w  ? fp8_tensorwise_gemm(s, GemmKind::kWgrad, cdy.cols, cdy.cols_scale, x_for_wgrad, x_scale)
                    : kernels::folded_mm(qdy.cols.t(), x_for_wgrad, emulated_fold(s, GemmKind::kWgrad));
      dw = dw.to(w_dtype);  // once: the master weight is float32
      // DGE (docs/design.md §4): W reaches Y through Q(W), whose estimated derivative multiplies
      // this product; through the OCC residual's bf16(W) it passes straight (added after).
      if (s.plan.dge) {
        const OperandUse fprop_w{GemmKind::kFprop, Operand::kB};
        dw = dw * dge_weight_factor(w_for_dge, spec_of(s, fprop_w),
                                    s.key(fprop_w.gemm, fprop_w.operand), *s.plan.dge);
      }
      if (residual.nnz() > 0) dw = dw + residual.transposed_times(bf16_values(dy)).t();
    }
    return {dx, dw, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor mx_linear(const at::Tensor& x, const at::Tensor& w,
                     const std::shared_ptr<const LinearState>& state) {
  TORCH_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1),
              "mx_linear: expected x (M x K) and w (N x K), got ", x.sizes(), " and ", w.sizes());
  require_usable(state->plan);
  return MXLinearFunction::apply(x.contiguous(), w, state, at::GradMode::is_enabled());
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

at::Tensor MXLinearImpl::forward(const at::Tensor& x) {
  const int64_t k = x.size(-1);
  std::vector<int64_t> out_shape(x.sizes().begin(), x.sizes().end());
  out_shape.back() = weight.size(0);
  return mx_linear(x.reshape({-1, k}), weight, state_).view(out_shape);
}

}  // namespace mxablate::trainer
