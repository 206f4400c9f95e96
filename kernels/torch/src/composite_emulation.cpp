// Fake quantization from ordinary tensor ops: one pass over memory per op, as research code does.
#include "mxablate/kernels/torch/composite_emulation.h"

#include <ATen/ATen.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "mxablate/kernels/block_scaling.h"
#include "mxablate/kernels/hadamard.h"
#include "tensor_checks.h"

namespace mxablate::kernels {
namespace {

// Rounds non-negative values `a` (already clamped to the format's largest value) onto the grid
// of a minifloat with `man_bits` mantissa bits and smallest normal exponent `emin`: the quantum
// is 2^(max(floor(log2 a), emin) - man_bits). Ties to even (at::round), or stochastically.
at::Tensor round_to_grid(const at::Tensor& a, int man_bits, int emin, bool stochastic) {
  const auto [mantissa, exponent] = at::frexp(a);  // a = mantissa * 2^exponent, mantissa in [0.5, 1)
  const at::Tensor floor_log2 = (exponent - 1).clamp_min(emin);
  const at::Tensor quantum = at::exp2((floor_log2 - man_bits).to(at::kFloat));
  at::Tensor units = a / quantum;
  units = stochastic ? at::floor(units + at::rand_like(units)) : at::round(units);
  return units * quantum;
}

// The normalized Sylvester matrix times the sign diagonal, as a right-multiplier of row chunks:
// rotated = chunk @ M with M = D H (H symmetric).
at::Tensor rotation_matrix(int n, const HadamardSigns& signs, const at::TensorOptions& options) {
  std::vector<float> m(static_cast<size_t>(n * n));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      const float h = (__builtin_popcount(static_cast<unsigned>(i & j)) % 2 == 0) ? 1.0f : -1.0f;
      m[static_cast<size_t>(i * n + j)] = (signs.negative(i) ? -h : h) * hadamard_norm(n);
    }
  return at::from_blob(m.data(), {n, n}, at::kFloat).clone().to(options.device());
}

// The SR pre-scale (docs/design.md §3): scales come from the values, the rounded elements are p x.
at::Tensor prescaled(const at::Tensor& t, float p) { return p == 1.0f ? t : t * p; }

at::Tensor mxfp4(const at::Tensor& lines, const QuantSpec& spec, bool stochastic, float p) {
  const at::Tensor blocks = lines.reshape({-1, kMXBlockSize});
  const at::Tensor amax = blocks.abs().amax(-1, /*keepdim=*/true);
  const auto [mantissa, exponent] = at::frexp(amax);
  at::Tensor e = exponent - 1 - kE2M1Emax;  // floor(log2 amax) - 2
  if (spec.scale_rule == ScaleRule::kCeil) e = e + (mantissa * 2 > 1.5).to(e.scalar_type());
  if (spec.scale_rule == ScaleRule::kEven) e = e + (at::round(mantissa * 4) == 4).to(e.scalar_type());
  const at::Tensor scale = at::exp2(e.clamp(kScaleExpMin, kScaleExpMax).to(at::kFloat));
  const at::Tensor y = prescaled(blocks, p) / scale;
  const at::Tensor q = round_to_grid(y.abs().clamp_max(kE2M1.max_finite), kE2M1.man_bits, 1 - kE2M1.bias, stochastic);
  return (q.copysign(y) * scale).reshape(lines.sizes());
}

at::Tensor nvfp4(const at::Tensor& lines, bool stochastic, float p) {
  const at::Tensor blocks = lines.reshape({-1, kNVBlockSize});
  const at::Tensor amax = lines.abs().amax();
  const at::Tensor global = at::where(amax > 0, amax / kNVFP4GlobalDivisor, at::ones_like(amax));
  const at::Tensor block_amax = blocks.abs().amax(-1, /*keepdim=*/true);
  const at::Tensor t = ((block_amax / 6.0f) / global).clamp_max(kE4M3.max_finite);
  const at::Tensor block_scale = round_to_grid(t, kE4M3.man_bits, 1 - kE4M3.bias, false);
  const at::Tensor divisor = block_scale * global;
  const at::Tensor y = at::where(divisor > 0, prescaled(blocks, p) / divisor, at::zeros_like(blocks));
  const at::Tensor q = round_to_grid(y.abs().clamp_max(kE2M1.max_finite), kE2M1.man_bits, 1 - kE2M1.bias, stochastic);
  return (q.copysign(y) * block_scale * global).reshape(lines.sizes());
}

at::Tensor fp8(const at::Tensor& lines, MinifloatFormat f, bool stochastic, float p) {
  const at::Tensor amax = lines.abs().amax();
  const at::Tensor d = at::where(amax > 0, amax / f.max_finite, at::ones_like(amax));
  const at::Tensor y = prescaled(lines, p) / d;
  const at::Tensor q = round_to_grid(y.abs().clamp_max(f.max_finite), f.man_bits, 1 - f.bias, stochastic);
  return q.copysign(y) * d;
}

}  // namespace

at::Tensor composite_fake_quantize(const at::Tensor& x, Axis axis, const QuantSpec& spec,
                                   const RngKey& key) {
  if (block_2d_tile(spec) != 0)  // it would silently use 1-D blocks
    throw std::invalid_argument("composite_fake_quantize does not implement 2-D blocks; use fake_quantize");
  detail::check_quantizable(x, axis, spec, "composite_fake_quantize input");
  // The per-block choice between two candidate scales has no composite-op formulation here; the
  // baseline measures the rules research code uses, and refuses rather than compute floor.
  if (spec.scale_rule == ScaleRule::kMse)
    throw std::invalid_argument("composite_fake_quantize: scale rule mse is not emulated (use fake_quantize)");
  // Research code moves the quantization axis last with a transposed copy.
  at::Tensor lines = x.to(at::kFloat);
  if (axis == Axis::kCols) lines = lines.t();
  lines = lines.contiguous();
  if (spec.hadamard != HadamardMode::kNone) {
    const int n = spec.hadamard_size;
    const at::Tensor m = rotation_matrix(n, hadamard_signs(spec.hadamard, key), lines.options());
    lines = lines.reshape({-1, n}).matmul(m).reshape(lines.sizes());
  }
  const bool stochastic = spec.rounding == Rounding::kStochastic;
  const float p = effective_sr_prescale(spec);
  at::Tensor q;
  switch (spec.format) {
    case QuantFormat::kFP32: q = prescaled(lines, p); break;
    case QuantFormat::kBF16: q = prescaled(lines, p).to(at::kBFloat16).to(at::kFloat); break;
    case QuantFormat::kMXFP4: q = mxfp4(lines, spec, stochastic, p); break;
    case QuantFormat::kNVFP4: q = nvfp4(lines, stochastic, p); break;
    case QuantFormat::kFP8E4M3: q = fp8(lines, kE4M3, stochastic, p); break;
    case QuantFormat::kFP8E5M2: q = fp8(lines, kE5M2, stochastic, p); break;
  }
  if (axis == Axis::kCols) q = q.t();
  return q.to(x.scalar_type()).contiguous();
}

}  // namespace mxablate::kernels
