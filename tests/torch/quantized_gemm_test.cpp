// kernels/torch quantized_gemm on CPU: the exact emulation against a float64 product of the same
// dequantized operands, the three training GEMMs' operand layouts, and the rotation cancelling.
#include <ATen/ATen.h>

#include <stdexcept>

#include "catch.h"
#include "mxablate/kernels/torch/fake_quantize.h"
#include "mxablate/kernels/torch/fp8_gemm.h"
#include "mxablate/kernels/torch/quantized_gemm.h"
#include "test_tensors.h"

using namespace mxablate::kernels;
using mxablate::test::activation_like;

namespace {

double relative_error(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor g = got.to(at::kDouble), w = want.to(at::kDouble);
  return (g - w).norm().item<double>() / w.norm().item<double>();
}

// L(t): the operand as the GEMM sees it, (M or N) x K, in float64.
at::Tensor logical64(const at::Tensor& q, Axis axis) {
  return (axis == Axis::kRows ? q : q.t()).to(at::kDouble);
}

}  // namespace

TEST_CASE("emulated GEMM equals a float64 product of the dequantized operands", "[torch][gemm]") {
  const QuantSpec mx{QuantFormat::kMXFP4};
  const QuantSpec mx_sr{QuantFormat::kMXFP4, ScaleRule::kFloor, Rounding::kStochastic};
  // Fprop Y = X Wᵀ, Dgrad dX = dY W, Wgrad dW = dYᵀ X with X: tokens x K_in, W: N_out x K_in.
  const int64_t tokens = 64, k_in = 96, n_out = 128;
  const at::Tensor x = activation_like(tokens, k_in, 1);
  const at::Tensor w = activation_like(n_out, k_in, 2);
  const at::Tensor dy = activation_like(tokens, n_out, 3);
  struct Case {
    const char* name;
    GemmOperand a, b;
    std::vector<int64_t> shape;
  };
  const std::vector<Case> cases{
      {"fprop", {x, Axis::kRows, mx, {1, 0, 0, GemmKind::kFprop, Operand::kA}},
       {w, Axis::kRows, mx, {1, 0, 0, GemmKind::kFprop, Operand::kB}}, {tokens, n_out}},
      {"dgrad", {dy, Axis::kRows, mx_sr, {1, 0, 0, GemmKind::kDgrad, Operand::kA}},
       {w, Axis::kCols, mx, {1, 0, 0, GemmKind::kDgrad, Operand::kB}}, {tokens, k_in}},
      {"wgrad", {dy, Axis::kCols, mx_sr, {1, 0, 0, GemmKind::kWgrad, Operand::kA}},
       {x, Axis::kCols, mx, {1, 0, 0, GemmKind::kWgrad, Operand::kB}}, {n_out, k_in}},
  };
  for (const Case& c : cases) {
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
      INFO(c.name << " " << dtype);
      GemmOperand a = c.a, b = c.b;
      a.tensor = a.tensor.to(dtype);
      b.tensor = b.tensor.to(dtype);
      GemmReport report;
      const at::Tensor got = quantized_gemm(a, b, GemmPath::kEmulated, &report);
      CHECK(got.sizes() == at::IntArrayRef(c.shape));
      CHECK(got.scalar_type() == dtype);
      const at::Tensor qa = fake_quantize(a.tensor, a.axis, a.spec, a.key);
      const at::Tensor qb = fake_quantize(b.tensor, b.axis, b.spec, b.key);
      const at::Tensor want = at::mm(logical64(qa, a.axis), logical64(qb, b.axis).t());
      // FP32 accumulation over K <= 128, then the output dtype's rounding.
      CHECK(relative_error(got, want) < (dtype == at::kFloat ? 1e-6 : 4e-3));
      CHECK(report.a.elements == static_cast<uint64_t>(a.tensor.numel()));
      CHECK(report.b.elements == static_cast<uint64_t>(b.tensor.numel()));
      CHECK(report.fp8_chunks == 0);
    }
  }
}

TEST_CASE("a Hadamard rotation on both operands cancels in the GEMM", "[torch][gemm]") {
  // With format fp32 the quantizer only rotates, so L(a) L(b)ᵀ must equal the unrotated product
  // up to float32 rounding, whichever axis each operand is rotated along.
  const at::Tensor x = activation_like(64, 128, 7);
  const at::Tensor w = activation_like(32, 128, 8);
  const at::Tensor exact = at::mm(x.to(at::kDouble), w.to(at::kDouble).t());
  for (HadamardMode mode : {HadamardMode::kDeterministic, HadamardMode::kFixedRandom,
                            HadamardMode::kPerStepRandom}) {
    for (int n : {16, 32, 64, 128}) {
      INFO(to_string(mode) << " n=" << n);
      const QuantSpec rotate_only{QuantFormat::kFP32, ScaleRule::kFloor, Rounding::kNearest, mode, n};
      // Both operands share the Hadamard signs: same (seed, step, layer, gemm), any operand.
      const GemmOperand a{x, Axis::kRows, rotate_only, {3, 9, 2, GemmKind::kWgrad, Operand::kA}};
      const GemmOperand b{w.t(), Axis::kCols, rotate_only, {3, 9, 2, GemmKind::kWgrad, Operand::kB}};
      CHECK(relative_error(quantized_gemm(a, b), exact) < 1e-5);
    }
  }
}

TEST_CASE("quantized_gemm refuses what it cannot do, in one sentence", "[torch][gemm]") {
  const QuantSpec mx{QuantFormat::kMXFP4};
  const at::Tensor a = at::randn({32, 64}), b = at::randn({32, 96});
  CHECK_THROWS_AS(quantized_gemm({a, Axis::kRows, mx, {}}, {b, Axis::kRows, mx, {}}),
                  std::invalid_argument);
  const GemmOperand ok{a, Axis::kRows, mx, {}};
  CHECK_THROWS_AS(quantized_gemm(ok, ok, GemmPath::kMXFP4AsFP8), std::invalid_argument);
  CHECK_FALSE(gemm_path_unavailable_reason(GemmPath::kMXFP4AsFP8, at::kCPU).empty());
  CHECK_FALSE(gemm_path_unavailable_reason(GemmPath::kHopperFP8, at::kCPU).empty());
  CHECK(gemm_path_unavailable_reason(GemmPath::kEmulated, at::kCPU).empty());
  CHECK_THROWS_AS(quantized_gemm(ok, ok, GemmPath::kHopperFP8), std::invalid_argument);
  CHECK(parse_gemm_path("hopper-fp8") == GemmPath::kHopperFP8);
  CHECK(to_string(GemmPath::kEmulated) == "emulated");
  CHECK_FALSE(parse_gemm_path("fast").has_value());
}

TEST_CASE("the fp8-tensorwise path is named, refused on the CPU saying why, and checks shapes", "[torch][gemm]") {
  CHECK(parse_gemm_path("fp8-tensorwise") == GemmPath::kFP8Tensorwise);
  CHECK(to_string(GemmPath::kFP8Tensorwise) == "fp8-tensorwise");
  const std::string why = gemm_path_unavailable_reason(GemmPath::kFP8Tensorwise, at::kCPU);
  CHECK(why.rfind("FP8 tensor cores need a CUDA device and the GPU kernels, this is cpu", 0) == 0);
  const QuantSpec e4m3{QuantFormat::kFP8E4M3};
  const at::Tensor x = at::randn({32, 64}), w = at::randn({48, 64});
  const GemmOperand a{x, Axis::kRows, e4m3, {}}, b{w, Axis::kRows, e4m3, {}};
  try {
    quantized_gemm(a, b, GemmPath::kFP8Tensorwise);
    FAIL("the CPU ran the fp8-tensorwise path");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()) == why);
  }
  // The emulation of the same GEMM runs anywhere: it is the reference the GPU path is held to.
  CHECK(quantized_gemm(a, b, GemmPath::kEmulated).sizes() == at::IntArrayRef({32, 48}));
  const AxisQuantization rows{e4m3, {}};
  try {
    fp8_quantize(x, &rows, nullptr);
    FAIL("fp8_quantize ran on the CPU");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()) ==
          "fp8_quantize: FP8 codes for tensor cores need a CUDA tensor and the GPU kernels, got a tensor "
          "on cpu (the emulated path runs anywhere)");
  }
  const AxisQuantization mx{QuantSpec{QuantFormat::kMXFP4}, {}};
  try {
    fp8_quantize(x, nullptr, &mx);
    FAIL("fp8_quantize took an MXFP4 spec");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()) == "fp8_quantize: the format must be fp8-e4m3 or fp8-e5m2, got mxfp4 (cols)");
  }
  CHECK_THROWS_AS(fp8_quantize(x, nullptr, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(fp8_tensorwise_mm(x, x, w, w, at::kFloat), std::invalid_argument);
  // cuBLASLt's FP8 kernels: K and N multiples of 16, any M.
  CHECK(fp8_tensorwise_shape_problem(16384, 768, 3072).empty());
  CHECK(fp8_tensorwise_shape_problem(7, 16, 32).empty());
  CHECK(fp8_tensorwise_shape_problem(64, 48, 40) ==
        "FP8 tensor cores need K and N to be multiples of 16, got K 40, N 48");
  CHECK(fp8_tensorwise_shape_problem(64, 24, 32) ==
        "FP8 tensor cores need K and N to be multiples of 16, got K 32, N 24");
  CHECK_FALSE(fp8_tensorwise_shape_problem(0, 16, 16).empty());
}

TEST_CASE("the SR pre-scales of both operands are divided back out of the product", "[torch][gemm]") {
  // Operands quantized with pre-scales pa, pb hold Q(pa a), Q(pb b); the GEMM returns
  // (Qa · Qbᵀ) / (pa pb), the division a float32 multiply by 1 / (pa pb) before the output's
  // rounding (docs/design.md §3). A round-to-nearest operand's pre-scale is ignored.
  const at::Tensor x = activation_like(64, 128, 11);
  const at::Tensor w = activation_like(32, 128, 12);
  QuantSpec sr_a{QuantFormat::kMXFP4, ScaleRule::kFloor, Rounding::kStochastic};
  sr_a.sr_prescale = 0.75f;
  QuantSpec sr_b = sr_a;
  sr_b.sr_prescale = 0.5f;
  QuantSpec rtn_b{QuantFormat::kMXFP4};
  rtn_b.sr_prescale = 0.5f;
  CHECK(sr_prescale_fold(sr_a, sr_b) == 1.0f / (0.75f * 0.5f));
  CHECK(sr_prescale_fold(sr_a, rtn_b) == 1.0f / 0.75f);
  CHECK(sr_prescale_fold(QuantSpec{}, rtn_b) == 1.0f);
  for (const QuantSpec& spec_b : {sr_b, rtn_b}) {
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
      INFO(to_string(spec_b.rounding) << " " << dtype);
      const GemmOperand a{x.to(dtype), Axis::kRows, sr_a, {4, 1, 0, GemmKind::kDgrad, Operand::kA}};
      const GemmOperand b{w.to(dtype).t(), Axis::kCols, spec_b, {4, 1, 0, GemmKind::kDgrad, Operand::kB}};
      const at::Tensor qa = fake_quantize(a.tensor, a.axis, a.spec, a.key);
      const at::Tensor qb = fake_quantize(b.tensor, b.axis, b.spec, b.key);
      const float fold = 1.0f / (0.75f * effective_sr_prescale(spec_b));
      // The same FP32 product and multiply, bit for bit.
      const at::Tensor want = (at::mm(qa.to(at::kFloat), qb.to(at::kFloat)) * fold).to(dtype);
      const at::Tensor got = quantized_gemm(a, b);
      CHECK(at::equal(got, want));
      // And against float64: (Qa Qbᵀ) / (pa pb), then an estimate of x wᵀ again.
      const at::Tensor exact = at::mm(logical64(qa, a.axis), logical64(qb, b.axis).t()) /
                               (0.75 * static_cast<double>(effective_sr_prescale(spec_b)));
      CHECK(relative_error(got, exact) < (dtype == at::kFloat ? 1e-6 : 4e-3));
      CHECK(relative_error(got, at::mm(x.to(at::kDouble), w.to(at::kDouble).t())) < 0.3);
    }
  }
}
