// kernels/torch on CUDA tensors: fake quantization bit-identical to the CPU path, and the GEMM
// paths — the exact emulation and the Hopper FP8 path against a float64 product of the
// dequantized operands, plus the FP8 path's inexact-chunk counter on inputs built to trigger it.
#include <ATen/ATen.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "catch.h"
#include "mxablate/kernels/torch/block_scales.h"
#include "mxablate/kernels/torch/fake_quantize.h"
#include "mxablate/kernels/torch/quantized_gemm.h"

using namespace mxablate::kernels;

namespace {

at::Tensor test_input(int64_t rows, int64_t cols, uint64_t seed, bool with_nonfinite) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  at::Tensor x = at::randn({rows, cols}, gen, at::TensorOptions().dtype(at::kFloat));
  x.select(1, 3).mul_(300.0);
  auto a = x.accessor<float, 2>();
  for (int64_t c = 0; c < 32; ++c) a[0][c] = 0.0f;
  a[rows - 1][cols - 1] = 3.0e38f;
  a[rows / 2][0] = 1.0e-42f;
  if (with_nonfinite) {
    a[1][cols / 2] = std::numeric_limits<float>::quiet_NaN();
    a[rows - 1][0] = -std::numeric_limits<float>::infinity();
  }
  return x;
}

bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor ca = a.cpu().contiguous(), cb = b.cpu().contiguous();
  return ca.scalar_type() == cb.scalar_type() && ca.sizes() == cb.sizes() &&
         std::memcmp(ca.data_ptr(), cb.data_ptr(), static_cast<size_t>(ca.nbytes())) == 0;
}

double relative_error(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor g = got.cpu().to(at::kDouble), w = want.cpu().to(at::kDouble);
  return ((g - w).norm() / w.norm()).item<double>();
}

at::Tensor logical64(const at::Tensor& q, Axis axis) {
  return (axis == Axis::kRows ? q : q.t()).cpu().to(at::kDouble);
}

}  // namespace

TEST_CASE("fake_quantize on CUDA equals fake_quantize on CPU", "[gpu][torch]") {
  const std::vector<QuantSpec> specs{
      {QuantFormat::kMXFP4},
      {QuantFormat::kMXFP4, ScaleRule::kCeil, Rounding::kStochastic, HadamardMode::kDeterministic, 16},
      {QuantFormat::kMXFP4, ScaleRule::kEven, Rounding::kStochastic, HadamardMode::kPerStepRandom, 128},
      {QuantFormat::kNVFP4, ScaleRule::kFloor, Rounding::kStochastic, HadamardMode::kFixedRandom, 64},
      {QuantFormat::kFP8E4M3},
      {QuantFormat::kFP8E5M2, ScaleRule::kFloor, Rounding::kStochastic},
      {QuantFormat::kBF16}};
  const RngKey key{77, 5, 2, GemmKind::kDgrad, Operand::kA};
  for (bool nonfinite : {false, true}) {
    const at::Tensor x = test_input(256, 384, 9, nonfinite);
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
      const at::Tensor cpu = x.to(dtype), cuda = cpu.to(at::kCUDA);
      for (const QuantSpec& spec : specs) {
        for (Axis axis : {Axis::kRows, Axis::kCols}) {
          INFO(to_string(spec.format) << " " << to_string(spec.hadamard) << " " << to_string(axis) << " " << dtype);
          QuantTelemetry tc, tg;
          const at::Tensor want = fake_quantize(cpu, axis, spec, key, &tc);
          const at::Tensor got = fake_quantize(cuda, axis, spec, key, &tg);
          CHECK(got.is_cuda());
          CHECK(same_bits(got, want));
          CHECK(tg.elements == tc.elements);
          CHECK(tg.saturated == tc.saturated);
          CHECK(tg.flushed == tc.flushed);
          CHECK(tg.nonfinite_blocks == tc.nonfinite_blocks);
          CHECK(tg.relative_error() == Approx(tc.relative_error()).epsilon(1e-9));
        }
      }
    }
  }
}

TEST_CASE("element_scales on CUDA equals element_scales on CPU", "[gpu][torch]") {
  const std::vector<QuantSpec> specs{{QuantFormat::kMXFP4},
                                     {QuantFormat::kMXFP4, ScaleRule::kCeil},
                                     {QuantFormat::kNVFP4}};
  const RngKey key{77, 5, 2, GemmKind::kFprop, Operand::kB};
  for (bool nonfinite : {false, true}) {
    const at::Tensor x = test_input(256, 384, 10, nonfinite);
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
      const at::Tensor cpu = x.to(dtype), cuda = cpu.to(at::kCUDA);
      for (const QuantSpec& spec : specs) {
        for (Axis axis : {Axis::kRows, Axis::kCols}) {
          INFO(to_string(spec.format) << " " << to_string(spec.scale_rule) << " " << to_string(axis) << " " << dtype);
          const at::Tensor got = element_scales(cuda, axis, spec, key);
          CHECK(got.is_cuda());
          CHECK(same_bits(got, element_scales(cpu, axis, spec, key)));
        }
      }
    }
  }
}

TEST_CASE("fake_quantize_both on CUDA equals the CPU path", "[gpu][torch]") {
  const at::Tensor x = test_input(512, 256, 4, true).to(at::kBFloat16);
  const AxisQuantization rows{{QuantFormat::kMXFP4}, {1, 2, 3, GemmKind::kFprop, Operand::kA}};
  const AxisQuantization cols{{QuantFormat::kMXFP4, ScaleRule::kFloor, Rounding::kStochastic, HadamardMode::kDeterministic, 16},
                              {1, 2, 3, GemmKind::kWgrad, Operand::kB}};
  const BothAxes want = fake_quantize_both(x, rows, cols);
  const BothAxes got = fake_quantize_both(x.to(at::kCUDA), rows, cols);
  CHECK(same_bits(got.rows, want.rows));
  CHECK(same_bits(got.cols, want.cols));
  // float32 in, BF16 out in the same pass (the trainer's case), and the other way round.
  for (const at::Tensor& in : {x.to(at::kFloat), x}) {
    const at::ScalarType out = in.scalar_type() == at::kFloat ? at::kBFloat16 : at::kFloat;
    const BothAxes cpu = fake_quantize_both(in, rows, cols, nullptr, nullptr, out);
    const BothAxes cuda = fake_quantize_both(in.to(at::kCUDA), rows, cols, nullptr, nullptr, out);
    CHECK(cuda.rows.scalar_type() == out);
    CHECK(same_bits(cuda.rows, cpu.rows));
    CHECK(same_bits(cuda.cols, cpu.cols));
    CHECK(same_bits(fake_quantize(in.to(at::kCUDA), Axis::kCols, cols.spec, cols.key, nullptr, out),
                    cpu.cols));
  }
}

TEST_CASE("CUDA GEMM paths agree with a float64 product of the dequantized operands", "[gpu][torch][gemm]") {
  // Fprop, Dgrad and Wgrad layouts at sizes the FP8 path accepts (K % 128, M and N % 16).
  const int64_t tokens = 256, k_in = 384, n_out = 512;
  const auto opt = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
  at::manual_seed(3);
  const at::Tensor x = at::randn({tokens, k_in}, opt), w = at::randn({n_out, k_in}, opt) * 0.05,
                   dy = at::randn({tokens, n_out}, opt) * 1e-3;
  const QuantSpec mx{QuantFormat::kMXFP4};
  const QuantSpec mx_sr_h16{QuantFormat::kMXFP4, ScaleRule::kFloor, Rounding::kStochastic, HadamardMode::kDeterministic, 16};
  struct Case {
    const char* name;
    GemmOperand a, b;
  };
  const std::vector<Case> cases{
      {"fprop", {x, Axis::kRows, mx, {1, 0, 0, GemmKind::kFprop, Operand::kA}},
       {w, Axis::kRows, mx, {1, 0, 0, GemmKind::kFprop, Operand::kB}}},
      {"dgrad", {dy, Axis::kRows, mx_sr_h16, {1, 0, 0, GemmKind::kDgrad, Operand::kA}},
       {w, Axis::kCols, {mx.format, mx.scale_rule, mx.rounding, HadamardMode::kDeterministic, 16},
        {1, 0, 0, GemmKind::kDgrad, Operand::kB}}},
      {"wgrad", {dy, Axis::kCols, mx_sr_h16, {1, 0, 0, GemmKind::kWgrad, Operand::kA}},
       {x, Axis::kCols, {mx.format, mx.scale_rule, mx.rounding, HadamardMode::kDeterministic, 16},
        {1, 0, 0, GemmKind::kWgrad, Operand::kB}}},
  };
  REQUIRE(gemm_path_unavailable_reason(GemmPath::kEmulated, x.device()).empty());
  const std::string fp8_unavailable = gemm_path_unavailable_reason(GemmPath::kHopperFP8, x.device());
  for (const Case& c : cases) {
    INFO(c.name);
    const at::Tensor qa = fake_quantize(c.a.tensor, c.a.axis, c.a.spec, c.a.key);
    const at::Tensor qb = fake_quantize(c.b.tensor, c.b.axis, c.b.spec, c.b.key);
    const at::Tensor exact = at::mm(logical64(qa, c.a.axis), logical64(qb, c.b.axis).t());
    GemmReport emu_report;
    const at::Tensor emulated = quantized_gemm(c.a, c.b, GemmPath::kEmulated, &emu_report);
    CHECK(emulated.scalar_type() == at::kBFloat16);
    // FP32 accumulation, then one bf16 rounding of the output (relative 2^-9 per element).
    CHECK(relative_error(emulated, exact) < 4e-3);
    if (!fp8_unavailable.empty()) {
      WARN("hopper-fp8 path not run: " << fp8_unavailable);
      continue;
    }
    GemmReport report;
    const at::Tensor fp8 = quantized_gemm(c.a, c.b, GemmPath::kHopperFP8, &report);
    CHECK(fp8.sizes() == emulated.sizes());
    CHECK(report.fp8_inexact_chunks == 0);
    CHECK(report.fp8_chunks == (c.a.tensor.numel() + c.b.tensor.numel()) / 128);
    CHECK(report.a.elements == emu_report.a.elements);
    CHECK(report.a.sum_sq_error == Approx(emu_report.a.sum_sq_error).epsilon(1e-9));
    CHECK(relative_error(fp8, exact) < 4e-3);
    CHECK(relative_error(fp8, emulated) < 4e-3);
  }
}

TEST_CASE("the FP8 path counts the chunks it cannot express exactly", "[gpu][torch][gemm]") {
  const at::Device cuda(at::kCUDA);
  if (!gemm_path_unavailable_reason(GemmPath::kHopperFP8, cuda).empty()) {
    WARN("hopper-fp8 path not available: " << gemm_path_unavailable_reason(GemmPath::kHopperFP8, cuda));
    return;
  }
  // 128 x 512: rows r % 4 == 0 get their second 32-block scaled down by 2^-20 in chunk 0 and 2,
  // 20 binades below the chunk's largest block: 32 rows x 2 chunks = 64 inexact chunks of A.
  at::manual_seed(5);
  at::Tensor a = at::randn({128, 512}, at::TensorOptions().dtype(at::kFloat));
  for (int64_t r = 0; r < 128; r += 4) {
    a[r].slice(0, 32, 64).mul_(std::ldexp(1.0, -20));
    a[r].slice(0, 288, 320).mul_(std::ldexp(1.0, -20));
  }
  const at::Tensor b = at::randn({64, 512}, at::TensorOptions().dtype(at::kFloat));
  const GemmOperand ga{a.to(cuda).to(at::kBFloat16), Axis::kRows, {QuantFormat::kMXFP4}, {}};
  const GemmOperand gb{b.to(cuda).to(at::kBFloat16), Axis::kRows, {QuantFormat::kMXFP4}, {}};
  GemmReport report;
  const at::Tensor fp8 = quantized_gemm(ga, gb, GemmPath::kHopperFP8, &report);
  CHECK(report.fp8_inexact_chunks == 64);
  CHECK(report.fp8_chunks == (128 + 64) * 4);
  // The lost bits are 2^-20 relative: the result still matches the exact emulation closely.
  CHECK(relative_error(fp8, quantized_gemm(ga, gb, GemmPath::kEmulated)) < 4e-3);
}

TEST_CASE("CUDA GEMM paths divide the SR pre-scales back out", "[gpu][torch][gemm]") {
  // Operands hold Q(pa a) and Q(pb b); every path must return (Qa Qbᵀ) / (pa pb): the emulated
  // path through cuBLAS's alpha (bf16) or an FP32 multiply (float32), the FP8 path through a's
  // chunk scales.
  at::manual_seed(9);
  const auto opt = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
  const at::Tensor x = at::randn({128, 256}, opt), w = at::randn({64, 256}, opt);
  QuantSpec sr_a{QuantFormat::kMXFP4, ScaleRule::kMse, Rounding::kStochastic};
  sr_a.sr_prescale = 0.75f;
  QuantSpec sr_b{QuantFormat::kMXFP4, ScaleRule::kFloor, Rounding::kStochastic};
  sr_b.sr_prescale = 0.5f;
  const std::string fp8_unavailable = gemm_path_unavailable_reason(GemmPath::kHopperFP8, x.device());
  for (at::ScalarType dtype : {at::kBFloat16, at::kFloat}) {
    INFO(dtype);
    const GemmOperand a{x.to(dtype), Axis::kRows, sr_a, {2, 5, 1, GemmKind::kFprop, Operand::kA}};
    const GemmOperand b{w.to(dtype), Axis::kRows, sr_b, {2, 5, 1, GemmKind::kFprop, Operand::kB}};
    const at::Tensor qa = fake_quantize(a.tensor, a.axis, a.spec, a.key);
    const at::Tensor qb = fake_quantize(b.tensor, b.axis, b.spec, b.key);
    const at::Tensor exact = at::mm(logical64(qa, a.axis), logical64(qb, b.axis).t()) / (0.75 * 0.5);
    CHECK(relative_error(quantized_gemm(a, b, GemmPath::kEmulated), exact) < (dtype == at::kFloat ? 1e-5 : 4e-3));
    if (!fp8_unavailable.empty()) {
      WARN("hopper-fp8 path not run: " << fp8_unavailable);
      continue;
    }
    CHECK(relative_error(quantized_gemm(a, b, GemmPath::kHopperFP8), exact) < 4e-3);
  }
}
