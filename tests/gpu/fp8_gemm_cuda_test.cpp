// The FP8 arm on FP8 tensor cores (fp8_gemm.h): the GPU's per-tensor FP8 codes equal the CPU
// reference bit for bit (both formats, float32 and bf16 inputs, both layouts alone and in one
// pass, NaN/Inf/zeros/subnormal-range values, ragged shapes; the fast cast of fp8_cast_gpu.h
// exhaustively over BF16 inputs), and the fp8-tensorwise GEMM equals the FP32 product of the
// decoded codes times the scales, and the exact emulation, within the tolerances stated at each
// check.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "catch.h"
#include "mxablate/kernels/block_scaling.h"
#include "mxablate/kernels/gpu/fp8_cast_gpu.h"
#include "mxablate/kernels/torch/fake_quantize.h"
#include "mxablate/kernels/torch/fp8_gemm.h"
#include "mxablate/kernels/torch/quantized_gemm.h"
#include "reference.h"

using namespace mxablate::kernels;

namespace {

// Gaussian values with an outlier column, a zero run, the float32 maximum, a subnormal, and
// optionally a NaN and a -Inf; `scale` shifts the whole tensor (1e-40: subnormal range).
at::Tensor fp8_test_input(int64_t rows, int64_t cols, uint64_t seed, bool with_nonfinite, float scale = 1.0f) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  at::Tensor x = at::randn({rows, cols}, gen, at::TensorOptions().dtype(at::kFloat)).mul_(scale);
  auto a = x.accessor<float, 2>();
  if (cols > 3) x.select(1, 3).mul_(300.0);
  for (int64_t c = 0; c < std::min<int64_t>(32, cols); ++c) a[0][c] = 0.0f;
  if (scale == 1.0f) a[rows - 1][cols - 1] = 3.0e38f;
  a[rows / 2][0] = 1.0e-42f;
  if (with_nonfinite) {
    a[std::min<int64_t>(1, rows - 1)][cols / 2] = std::numeric_limits<float>::quiet_NaN();
    a[rows - 1][0] = -std::numeric_limits<float>::infinity();
  }
  return x;
}

// The CPU reference's FP8 codes (line by line along `axis`) and decode scale of x (float32).
struct RefCodes {
  std::vector<uint8_t> codes;
  float scale = 0;
  QuantTelemetry telemetry;
};

RefCodes reference_codes(const at::Tensor& x, Axis axis, const AxisQuantization& q) {
  const at::Tensor in = x.to(at::kFloat).contiguous();
  RefCodes r;
  r.codes.resize(packed_bytes(q.spec.format, in.size(0), in.size(1)));
  QuantOutputs out;
  out.packed = r.codes.data();
  out.tensor_scale = &r.scale;
  r.telemetry = quantize(in.data_ptr<float>(), in.size(0), in.size(1), axis, q.spec, q.key, out);
  return r;
}

std::vector<uint8_t> code_bytes(const at::Tensor& codes) {
  const at::Tensor host = codes.cpu().contiguous().view(at::kByte);
  const auto* p = host.data_ptr<uint8_t>();
  return std::vector<uint8_t>(p, p + host.numel());
}

bool same_float_bits(const at::Tensor& one_float, float want) {
  const float got = one_float.cpu().item<float>();
  return std::memcmp(&got, &want, 4) == 0;
}

double relative_error(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor g = got.cpu().to(at::kDouble), w = want.cpu().to(at::kDouble);
  return ((g - w).norm() / w.norm()).item<double>();
}

// sum_k code_a * code_b * d_a * d_b in float64 on the host: the products of FP8 values and
// their sums are exact there (to far below any tolerance used here).
at::Tensor decoded_product(const at::Tensor& a_codes, const at::Tensor& a_scale, const at::Tensor& b_codes,
                           const at::Tensor& b_scale, double fold = 1.0) {
  const at::Tensor a = a_codes.cpu().to(at::kDouble), b = b_codes.cpu().to(at::kDouble);
  const double sa = a_scale.cpu().item<float>(), sb = b_scale.cpu().item<float>();
  return at::mm(a, b.t()) * (sa * sb * fold);
}

std::string fp8_gemm_unavailable() {
  return gemm_path_unavailable_reason(GemmPath::kFP8Tensorwise, at::Device(at::kCUDA, 0));
}

}  // namespace

TEST_CASE("fp8_quantize on CUDA writes the CPU reference's codes and scale, bit for bit", "[gpu][torch][fp8]") {
  struct Shape {
    int64_t rows, cols;
  };
  // Tile multiples; ragged both ways; columns not a multiple of 4 (scalar loads); short lines.
  const std::vector<Shape> shapes{{128, 256}, {160, 96}, {96, 102}, {64, 48}, {1, 16}};
  QuantSpec e4m3_sr{QuantFormat::kFP8E4M3, ScaleRule::kFloor, Rounding::kStochastic};
  e4m3_sr.sr_prescale = 0.75f;
  const std::vector<QuantSpec> specs{{QuantFormat::kFP8E4M3}, {QuantFormat::kFP8E5M2}, e4m3_sr,
                                     {QuantFormat::kFP8E5M2, ScaleRule::kFloor, Rounding::kStochastic}};
  int call = 0;
  for (const Shape s : shapes) {
    for (int variant = 0; variant < 4; ++variant) {
      // Finite; with NaN/Inf; all zeros; subnormal range (the scale's lower clamp).
      at::Tensor x = variant == 2 ? at::zeros({s.rows, s.cols})
                                  : fp8_test_input(s.rows, s.cols, 7 + call, variant == 1, variant == 3 ? 1e-40f : 1.0f);
      for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
        const at::Tensor in = x.to(dtype);  // the reference quantizes the same (bf16) values
        for (const QuantSpec& spec : specs) {
          ++call;
          const AxisQuantization rows{spec, {11, 3, 2, GemmKind::kFprop, Operand::kA}};
          const AxisQuantization cols{spec, {11, 3, 2, GemmKind::kWgrad, Operand::kB}};
          const RefCodes want_rows = reference_codes(in, Axis::kRows, rows);
          const RefCodes want_cols = reference_codes(in, Axis::kCols, cols);
          INFO(mxablate::test::describe(spec, Axis::kRows, s.rows, s.cols) << " " << c10::toString(dtype) << " variant " << variant);
          const at::Tensor cuda_in = in.to(at::kCUDA);
          // Both layouts in one call (telemetry on every other call), then each alone.
          QuantTelemetry rt, ct;
          const bool tel = call % 2 == 0;
          const Fp8Codes both = fp8_quantize(cuda_in, &rows, &cols, tel ? &rt : nullptr, tel ? &ct : nullptr);
          const Fp8Codes r_only = fp8_quantize(cuda_in, &rows, nullptr);
          const Fp8Codes c_only = fp8_quantize(cuda_in, nullptr, &cols);
          CHECK(both.rows.sizes() == at::IntArrayRef({s.rows, s.cols}));
          CHECK(both.cols.sizes() == at::IntArrayRef({s.cols, s.rows}));
          CHECK(c10::toString(both.rows.scalar_type()) ==
                std::string(spec.format == QuantFormat::kFP8E4M3 ? "Float8_e4m3fn" : "Float8_e5m2"));
          CHECK(code_bytes(both.rows) == want_rows.codes);
          CHECK(code_bytes(both.cols) == want_cols.codes);
          CHECK(code_bytes(r_only.rows) == want_rows.codes);
          CHECK(code_bytes(c_only.cols) == want_cols.codes);
          CHECK(same_float_bits(both.rows_scale, want_rows.scale));
          CHECK(same_float_bits(both.cols_scale, want_cols.scale));
          CHECK(same_float_bits(r_only.rows_scale, want_rows.scale));
          CHECK(same_float_bits(c_only.cols_scale, want_cols.scale));
          CHECK_FALSE(r_only.cols.defined());
          if (tel) {
            std::string why_rows, why_cols;
            const bool rows_match = mxablate::test::telemetry_matches(rt, want_rows.telemetry, &why_rows);
            const bool cols_match = mxablate::test::telemetry_matches(ct, want_cols.telemetry, &why_cols);
            INFO("rows: " << why_rows << " cols: " << why_cols);
            CHECK(rows_match);
            CHECK(cols_match);
          }
          if (variant == 1) CHECK(std::isnan(both.rows_scale.cpu().item<float>()));
          if (variant == 2) CHECK(both.rows_scale.cpu().item<float>() == 1.0f);
        }
      }
    }
  }
}

TEST_CASE("the fp8-tensorwise GEMM equals the decoded codes' product and the exact emulation", "[gpu][torch][fp8][gemm]") {
  const std::string unavailable = fp8_gemm_unavailable();
  if (!unavailable.empty()) MXABLATE_SKIP("fp8-tensorwise GEMM not run: " << unavailable);
  // The three training GEMMs' layouts (fp8_gemm.h), K and N multiples of 16, M ragged.
  const int64_t tokens = 272, k_in = 384, n_out = 512;
  const QuantSpec e4m3{QuantFormat::kFP8E4M3}, e5m2{QuantFormat::kFP8E5M2};
  QuantSpec e5m2_sr{QuantFormat::kFP8E5M2, ScaleRule::kFloor, Rounding::kStochastic};
  e5m2_sr.sr_prescale = 0.75f;
  for (at::ScalarType dtype : {at::kBFloat16, at::kFloat}) {
    at::manual_seed(3);
    const auto opt = at::TensorOptions().device(at::kCUDA).dtype(dtype);
    const at::Tensor x = at::randn({tokens, k_in}, opt), w = at::randn({n_out, k_in}, opt) * 0.05,
                     dy = at::randn({tokens, n_out}, opt) * 1e-3;
    struct Case {
      const char* name;
      GemmOperand a, b;
    };
    const std::vector<Case> cases{
        {"fprop", {x, Axis::kRows, e4m3, {1, 0, 0, GemmKind::kFprop, Operand::kA}},
         {w, Axis::kRows, e4m3, {1, 0, 0, GemmKind::kFprop, Operand::kB}}},
        {"dgrad", {dy, Axis::kRows, e5m2, {1, 0, 0, GemmKind::kDgrad, Operand::kA}},
         {w, Axis::kCols, e4m3, {1, 0, 0, GemmKind::kDgrad, Operand::kB}}},
        {"wgrad", {dy, Axis::kCols, e5m2, {1, 0, 0, GemmKind::kWgrad, Operand::kA}},
         {x, Axis::kCols, e4m3, {1, 0, 0, GemmKind::kWgrad, Operand::kB}}},
        {"dgrad, SR with pre-scale 3/4", {dy, Axis::kRows, e5m2_sr, {1, 0, 0, GemmKind::kDgrad, Operand::kA}},
         {w, Axis::kCols, e4m3, {1, 0, 0, GemmKind::kDgrad, Operand::kB}}},
    };
    for (const Case& c : cases) {
      INFO(c.name << ", " << c10::toString(dtype) << " operands");
      const AxisQuantization qa{c.a.spec, c.a.key}, qb{c.b.spec, c.b.key};
      const bool a_rows = c.a.axis == Axis::kRows, b_rows = c.b.axis == Axis::kRows;
      const Fp8Codes ca = fp8_quantize(c.a.tensor, a_rows ? &qa : nullptr, a_rows ? nullptr : &qa);
      const Fp8Codes cb = fp8_quantize(c.b.tensor, b_rows ? &qb : nullptr, b_rows ? nullptr : &qb);
      const at::Tensor& codes_a = a_rows ? ca.rows : ca.cols;
      const at::Tensor& codes_b = b_rows ? cb.rows : cb.cols;
      const at::Tensor& scale_a = a_rows ? ca.rows_scale : ca.cols_scale;
      const at::Tensor& scale_b = b_rows ? cb.rows_scale : cb.cols_scale;
      const double fold = sr_prescale_fold(c.a.spec, c.b.spec);
      const at::Tensor exact = decoded_product(codes_a, scale_a, codes_b, scale_b, fold);
      // Float32 output: Hopper's FP8 tensor cores do not accumulate in IEEE float32 (their
      // partial sums keep fewer mantissa bits until cuBLAS promotes them), so the product is
      // only close to float64's: measured 1.0e-4 to 1.3e-4 relative on an H100 (2026-11-23).
      // 1e-3 still catches a wrong scale, layout or code (errors of order one).
      constexpr double kTensorCore = 1e-3;
      const at::Tensor f32 = fp8_tensorwise_mm(codes_a, scale_a, codes_b, scale_b, at::kFloat, static_cast<float>(fold));
      CHECK(f32.scalar_type() == at::kFloat);
      CHECK(relative_error(f32, exact) < kTensorCore);
      // Through quantized_gemm: the same codes (the quantizer is deterministic), output in the
      // operands' dtype: bf16 adds one rounding of each output (relative 2^-9 per element).
      const at::Tensor tc = quantized_gemm(c.a, c.b, GemmPath::kFP8Tensorwise);
      CHECK(tc.scalar_type() == dtype);
      CHECK(relative_error(tc, exact) < (dtype == at::kFloat ? kTensorCore : 4e-3));
      // The emulation multiplies the dequantized values code * d, rounded to float32 (float32
      // operands) or to bf16 (bf16 operands: relative <= 2^-9 per operand element, d being no
      // power of two), then rounds the output likewise: within kTensorCore and 6e-3.
      const at::Tensor emulated = quantized_gemm(c.a, c.b, GemmPath::kEmulated);
      CHECK(emulated.scalar_type() == tc.scalar_type());
      CHECK(relative_error(tc, emulated) < (dtype == at::kFloat ? kTensorCore : 6e-3));
    }
  }
}

TEST_CASE("the fp8-tensorwise GEMM of a non-finite operand is NaN everywhere, as the emulation's", "[gpu][torch][fp8][gemm]") {
  const std::string unavailable = fp8_gemm_unavailable();
  if (!unavailable.empty()) MXABLATE_SKIP("fp8-tensorwise GEMM not run: " << unavailable);
  at::Tensor x = at::randn({64, 128});
  x[5][7] = std::numeric_limits<float>::infinity();
  const GemmOperand a{x.to(at::kCUDA).to(at::kBFloat16), Axis::kRows, {QuantFormat::kFP8E4M3}, {}};
  const GemmOperand b{at::randn({32, 128}).to(at::kCUDA).to(at::kBFloat16), Axis::kRows, {QuantFormat::kFP8E4M3}, {}};
  CHECK(quantized_gemm(a, b, GemmPath::kFP8Tensorwise).isnan().all().item<bool>());
  CHECK(quantized_gemm(a, b, GemmPath::kEmulated).isnan().all().item<bool>());
}

TEST_CASE("the fp8-tensorwise GEMM refuses what FP8 tensor cores cannot do, in one sentence", "[gpu][torch][fp8][gemm]") {
  const std::string unavailable = fp8_gemm_unavailable();
  if (!unavailable.empty()) MXABLATE_SKIP("fp8-tensorwise GEMM not run: " << unavailable);
  const auto opt = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
  const QuantSpec e4m3{QuantFormat::kFP8E4M3}, e5m2{QuantFormat::kFP8E5M2};
  const at::Tensor a = at::randn({64, 128}, opt), b = at::randn({48, 128}, opt), odd = at::randn({40, 128}, opt);
  const auto message = [](const GemmOperand& x, const GemmOperand& y) {
    try {
      quantized_gemm(x, y, GemmPath::kFP8Tensorwise);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(message({a, Axis::kRows, e5m2, {}}, {b, Axis::kRows, e5m2, {}}) ==
        "the fp8-tensorwise GEMM path has no e5m2 x e5m2 kernel");
  CHECK(message({a, Axis::kRows, e4m3, {}}, {odd, Axis::kRows, e4m3, {}}) ==
        "the fp8-tensorwise GEMM path: FP8 tensor cores need K and N to be multiples of 16, got K 128, N 40");
  CHECK(message({a, Axis::kRows, {QuantFormat::kMXFP4}, {}}, {b, Axis::kRows, e4m3, {}}) ==
        "the fp8-tensorwise GEMM path needs fp8-e4m3 or fp8-e5m2 operands, got mxfp4");
}

// ---- the fast FP8 cast (fp8_cast_gpu.h) --------------------------------------------------

namespace {

struct FastCast {
  at::Tensor rows, cols, scales;  // scales: [rows d, cols d]
};

// gpu::fp8_cast called directly (not through fp8_quantize, which may fall back), so these tests
// are known to test the fast kernels themselves.
FastCast fast_cast(const at::Tensor& cuda_in, const QuantSpec* rows_spec, const QuantSpec* cols_spec) {
  FastCast r;
  const at::Tensor in = cuda_in.contiguous();
  const at::TensorOptions bytes = in.options().dtype(at::kByte);
  at::Tensor workspace = at::empty({static_cast<int64_t>(gpu::fp8_cast_workspace_bytes())}, bytes);
  r.scales = at::full({8}, -1.0f, in.options().dtype(at::kFloat));
  gpu::Fp8CastAxis ra, ca;
  gpu::Fp8CastJob job{in.data_ptr(), in.scalar_type() == at::kFloat ? gpu::InputType::kFloat32 : gpu::InputType::kBFloat16,
                      in.size(0), in.size(1), nullptr, nullptr, workspace.data_ptr()};
  if (rows_spec) {
    r.rows = at::empty({in.size(0), in.size(1)}, bytes);
    ra = {*rows_spec, r.rows.data_ptr<uint8_t>(), r.scales.data_ptr<float>(), {}};
    job.along_rows = &ra;
  }
  if (cols_spec) {
    r.cols = at::empty({in.size(1), in.size(0)}, bytes);
    ca = {*cols_spec, r.cols.data_ptr<uint8_t>(), r.scales.data_ptr<float>() + 4, {}};
    job.down_cols = &ca;
  }
  const std::string unsupported = gpu::fp8_cast_unsupported_reason(job);
  INFO(unsupported);
  REQUIRE(unsupported.empty());
  gpu::fp8_cast(job, at::cuda::getCurrentCUDAStream().stream());
  return r;
}

float scale_at(const FastCast& c, int i) { return c.scales.cpu()[i].item<float>(); }

bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

}  // namespace

TEST_CASE("the fast FP8 cast writes the CPU reference's codes and scales in both layouts", "[gpu][torch][fp8][fast_cast]") {
  struct Shape {
    int64_t rows, cols;
  };
  // Whole 64-tiles; partial tiles both ways; one 16 x 16 block; tall and wide.
  const std::vector<Shape> shapes{{256, 192}, {80, 208}, {16, 16}, {1040, 48}, {32, 2064}};
  const QuantSpec e4m3{QuantFormat::kFP8E4M3}, e5m2{QuantFormat::kFP8E5M2};
  struct Pair {
    const QuantSpec* rows;
    const QuantSpec* cols;
  };
  const std::vector<Pair> pairs{{&e4m3, &e4m3}, {&e5m2, &e5m2}, {&e4m3, &e5m2}, {&e5m2, nullptr}, {nullptr, &e4m3}};
  int call = 0;
  for (const Shape s : shapes) {
    for (int variant = 0; variant < 5; ++variant) {
      // Finite; NaN/Inf; all zeros; subnormal range; negated (signed zeros among the values).
      at::Tensor x = variant == 2 ? at::zeros({s.rows, s.cols})
                                  : fp8_test_input(s.rows, s.cols, 101 + call, variant == 1, variant == 3 ? 1e-40f : 1.0f);
      if (variant == 4) x = -x;
      for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
        const at::Tensor in = x.to(dtype);
        for (const Pair p : pairs) {
          ++call;
          INFO("shape " << s.rows << " x " << s.cols << " " << c10::toString(dtype) << " variant " << variant << " pair "
                        << (p.rows ? to_string(p.rows->format) : "-") << "/" << (p.cols ? to_string(p.cols->format) : "-"));
          const FastCast got = fast_cast(in.to(at::kCUDA), p.rows, p.cols);
          if (p.rows) {
            const RefCodes want = reference_codes(in, Axis::kRows, {*p.rows, {}});
            CHECK(code_bytes(got.rows) == want.codes);
            CHECK(same_bits(scale_at(got, 0), want.scale));
          }
          if (p.cols) {
            const RefCodes want = reference_codes(in, Axis::kCols, {*p.cols, {}});
            CHECK(code_bytes(got.cols) == want.codes);
            CHECK(same_bits(scale_at(got, 4), want.scale));
          }
          if (!p.rows) CHECK(scale_at(got, 0) == -1.0f);  // nothing written for an axis not asked for
        }
      }
    }
  }
}

TEST_CASE("the fast FP8 cast rounds every BF16 value as the reference does, ties and saturation included", "[gpu][torch][fp8][fast_cast]") {
  // Every finite BF16 value of magnitude at most the format's maximum, plus the maximum itself:
  // the decode scale is then exactly 1, so the codes are the rounding of the values themselves —
  // every midpoint between FP8 neighbours (a BF16 value: FP8 has at most 3 mantissa bits),
  // every subnormal, both zeros. The BF16 values just above the maximum run in a second tensor
  // whose amax makes d slightly above 1 (saturation after the division).
  for (const QuantSpec spec : {QuantSpec{QuantFormat::kFP8E4M3}, QuantSpec{QuantFormat::kFP8E5M2}}) {
    const float max_finite = spec.format == QuantFormat::kFP8E4M3 ? 448.0f : 57344.0f;
    std::vector<float> values;
    for (uint32_t b = 0; b < 0x10000u; ++b) {
      const float v = bits_float(b << 16);
      if (std::isfinite(v) && std::fabs(v) <= max_finite) values.push_back(v);
    }
    values.push_back(max_finite);
    while (values.size() % (256 * 16) != 0) values.push_back(0.0f);  // rows a multiple of 16
    const int64_t rows = static_cast<int64_t>(values.size()) / 256;
    const at::Tensor x = at::from_blob(values.data(), {rows, 256}, at::kFloat).clone();
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
      INFO(to_string(spec.format) << " " << c10::toString(dtype));
      const at::Tensor in = x.to(dtype);
      const FastCast got = fast_cast(in.to(at::kCUDA), &spec, &spec);
      const RefCodes want_rows = reference_codes(in, Axis::kRows, {spec, {}});
      const RefCodes want_cols = reference_codes(in, Axis::kCols, {spec, {}});
      CHECK(scale_at(got, 0) == 1.0f);
      CHECK(code_bytes(got.rows) == want_rows.codes);
      CHECK(code_bytes(got.cols) == want_cols.codes);
      // Scaled up by 1.0625: d is no longer 1, every value is divided before rounding.
      const at::Tensor scaled = (x * 1.0625f).to(dtype);
      const FastCast got2 = fast_cast(scaled.to(at::kCUDA), &spec, nullptr);
      const RefCodes want2 = reference_codes(scaled, Axis::kRows, {spec, {}});
      CHECK(code_bytes(got2.rows) == want2.codes);
      CHECK(same_bits(scale_at(got2, 0), want2.scale));
    }
  }
}

TEST_CASE("fp8_quantize takes the fast cast and the general quantizer to the same bits", "[gpu][torch][fp8][fast_cast]") {
  // With telemetry asked for, fp8_quantize runs the general quantizer; without, the fast cast.
  const AxisQuantization rows{{QuantFormat::kFP8E4M3}, {5, 1, 0, GemmKind::kFprop, Operand::kA}};
  const AxisQuantization cols{{QuantFormat::kFP8E4M3}, {5, 1, 0, GemmKind::kWgrad, Operand::kB}};
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    const at::Tensor x = fp8_test_input(2048, 768, 9, false).to(dtype).to(at::kCUDA);
    QuantTelemetry rt, ct;
    const Fp8Codes general = fp8_quantize(x, &rows, &cols, &rt, &ct);
    const Fp8Codes fast = fp8_quantize(x, &rows, &cols);
    CHECK(code_bytes(fast.rows) == code_bytes(general.rows));
    CHECK(code_bytes(fast.cols) == code_bytes(general.cols));
    CHECK(same_bits(fast.rows_scale.cpu().item<float>(), general.rows_scale.cpu().item<float>()));
    CHECK(same_bits(fast.cols_scale.cpu().item<float>(), general.cols_scale.cpu().item<float>()));
  }
}

TEST_CASE("the fast FP8 cast says in one sentence what it does not take", "[gpu][torch][fp8][fast_cast]") {
  const at::Tensor x = at::zeros({64, 64}, at::TensorOptions(at::kCUDA).dtype(at::kBFloat16));
  const at::Tensor codes = at::empty({64 * 64 + 16}, x.options().dtype(at::kByte));
  const at::Tensor scale = at::empty({8}, x.options().dtype(at::kFloat));
  const auto reason = [&](QuantSpec spec, int64_t rows, int64_t cols, size_t code_offset, const void* input) {
    gpu::Fp8CastAxis a{spec, codes.data_ptr<uint8_t>() + code_offset, scale.data_ptr<float>(), {}};
    gpu::Fp8CastJob job{input, gpu::InputType::kBFloat16, rows, cols, &a, nullptr, scale.data_ptr<float>() + 4};
    return gpu::fp8_cast_unsupported_reason(job);
  };
  const QuantSpec e4m3{QuantFormat::kFP8E4M3};
  CHECK(reason(e4m3, 64, 64, 0, x.data_ptr()).empty());
  CHECK(reason({QuantFormat::kFP8E4M3, ScaleRule::kFloor, Rounding::kStochastic}, 64, 64, 0, x.data_ptr()).find("stochastic") !=
        std::string::npos);
  CHECK(reason({QuantFormat::kFP8E4M3, ScaleRule::kFloor, Rounding::kNearest, HadamardMode::kDeterministic, 16}, 64, 64, 0,
               x.data_ptr())
            .find("rotation") != std::string::npos);
  CHECK(reason({QuantFormat::kMXFP4}, 64, 64, 0, x.data_ptr()).find("mxfp4") != std::string::npos);
  CHECK(reason(e4m3, 64, 56, 0, x.data_ptr()).find("64 x 56") != std::string::npos);
  CHECK(reason(e4m3, 64, 64, 8, x.data_ptr()).find("aligned code buffer") != std::string::npos);
  CHECK(reason(e4m3, 64, 64, 0, static_cast<const uint8_t*>(x.data_ptr()) + 2).find("aligned input") != std::string::npos);
  gpu::Fp8CastJob none{x.data_ptr(), gpu::InputType::kBFloat16, 64, 64, nullptr, nullptr, scale.data_ptr()};
  CHECK_THROWS_AS(gpu::fp8_cast(none, nullptr), std::invalid_argument);
}

// ---- FP8 delayed scaling (docs/design.md §3, "FP8, per-tensor delayed scaling") ---------------

namespace {

int32_t amax_bits(float x) {
  int32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

// The CPU reference under delayed scaling: codes, decode scale, and the record after the call
// (starting from `record`).
struct RefDelayed {
  RefCodes codes;
  int32_t record = 0;
};

RefDelayed reference_delayed(const at::Tensor& x, Axis axis, const QuantSpec& spec, const RngKey& key, int32_t window,
                             int32_t record, int margin) {
  const at::Tensor in = x.to(at::kFloat).contiguous();
  RefDelayed r;
  r.record = record;
  r.codes.codes.resize(packed_bytes(spec.format, in.size(0), in.size(1)));
  QuantOutputs out;
  out.packed = r.codes.codes.data();
  out.tensor_scale = &r.codes.scale;
  r.codes.telemetry = quantize(in.data_ptr<float>(), in.size(0), in.size(1), axis, spec, key, out,
                               Fp8DelayedScale{&window, &r.record, margin});
  return r;
}

// The device state of two instances: [rows window, cols window, rows record, cols record].
at::Tensor delayed_state(int32_t rows_window, int32_t cols_window, int32_t record) {
  return at::tensor(std::vector<int32_t>{rows_window, cols_window, record, record}, at::kInt).to(at::kCUDA);
}

AxisQuantization delayed_axis(const QuantSpec& spec, const RngKey& key, const at::Tensor& state, int which, int margin) {
  return {spec, key, {state.data_ptr<int32_t>() + which, state.data_ptr<int32_t>() + 2 + which, margin}};
}

}  // namespace

TEST_CASE("fp8_quantize under delayed scaling writes the CPU reference's codes, scale and amax record", "[gpu][torch][fp8][delayed]") {
  struct Shape {
    int64_t rows, cols;
  };
  // Fast-cast shapes (multiples of 16) and ragged ones (the general quantizer).
  const std::vector<Shape> shapes{{256, 192}, {80, 208}, {96, 102}, {1, 16}};
  QuantSpec e4m3_sr{QuantFormat::kFP8E4M3, ScaleRule::kFloor, Rounding::kStochastic};
  e4m3_sr.sr_prescale = 0.75f;
  const std::vector<QuantSpec> specs{{QuantFormat::kFP8E4M3}, {QuantFormat::kFP8E5M2}, e4m3_sr};
  // Windows: empty (current scaling), far below the amax (saturation), above it, zero, non-finite.
  const std::vector<int32_t> windows{kNoAmax, amax_bits(0.5f), amax_bits(5000.0f), 0, kNonfiniteAmax};
  int call = 0;
  for (const Shape s : shapes) {
    for (int variant = 0; variant < 2; ++variant) {
      const at::Tensor x = fp8_test_input(s.rows, s.cols, 31 + call, variant == 1, variant == 1 ? 1.0f : 0.01f);
      for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
        const at::Tensor in = x.to(dtype);
        const at::Tensor cuda_in = in.to(at::kCUDA);
        for (const QuantSpec& spec : specs) {
          for (const int32_t window : windows) {
            ++call;
            const int margin = call % 3 == 0 ? 3 : 0;
            // A record that already holds an earlier micro-batch's amax, every other call.
            const int32_t before = call % 2 == 0 ? kNoAmax : amax_bits(1.0e30f);
            const RngKey rk{11, 3, 2, GemmKind::kFprop, Operand::kA}, ck{11, 3, 2, GemmKind::kWgrad, Operand::kB};
            const RefDelayed want_rows = reference_delayed(in, Axis::kRows, spec, rk, window, before, margin);
            const RefDelayed want_cols = reference_delayed(in, Axis::kCols, spec, ck, window, before, margin);
            INFO(mxablate::test::describe(spec, Axis::kRows, s.rows, s.cols) << " " << c10::toString(dtype) << " variant "
                                                                             << variant << " window " << window << " margin "
                                                                             << margin);
            for (int telemetry = 0; telemetry < 2; ++telemetry) {
              // Without telemetry the fast cast where it applies; with it, the general quantizer.
              const at::Tensor state = delayed_state(window, window, before);
              const AxisQuantization rows = delayed_axis(spec, rk, state, 0, margin);
              const AxisQuantization cols = delayed_axis(spec, ck, state, 1, margin);
              QuantTelemetry rt, ct;
              const Fp8Codes got = fp8_quantize(cuda_in, &rows, &cols, telemetry ? &rt : nullptr, telemetry ? &ct : nullptr);
              CHECK(code_bytes(got.rows) == want_rows.codes.codes);
              CHECK(code_bytes(got.cols) == want_cols.codes.codes);
              CHECK(same_float_bits(got.rows_scale, want_rows.codes.scale));
              CHECK(same_float_bits(got.cols_scale, want_cols.codes.scale));
              const at::Tensor host = state.cpu();
              CHECK(host[2].item<int32_t>() == want_rows.record);
              CHECK(host[3].item<int32_t>() == want_cols.record);
              CHECK(host[0].item<int32_t>() == window);  // the window is only read
              if (telemetry) CHECK(rt.saturated == want_rows.codes.telemetry.saturated);
            }
            // The emulated route's fake quantization, the same decode scale and values.
            const at::Tensor state = delayed_state(window, window, before);
            const AxisQuantization rows = delayed_axis(spec, rk, state, 0, margin);
            const at::Tensor fq = fake_quantize(cuda_in, Axis::kRows, rows, nullptr, at::kFloat).cpu();
            int32_t cpu_record = before;
            const at::Tensor want_fq =
                fake_quantize(in, Axis::kRows, AxisQuantization{spec, rk, {&window, &cpu_record, margin}}, nullptr, at::kFloat);
            CHECK(cpu_record == want_rows.record);
            CHECK(at::equal(fq.isnan(), want_fq.isnan()));
            CHECK(at::equal(at::nan_to_num(fq), at::nan_to_num(want_fq)));
            CHECK(state.cpu()[2].item<int32_t>() == want_rows.record);
          }
        }
      }
    }
  }
}

TEST_CASE("the fast FP8 cast under delayed scaling replays in a CUDA graph with each replay's window", "[gpu][torch][fp8][delayed][graph]") {
  const QuantSpec e4m3{QuantFormat::kFP8E4M3};
  const RngKey rk{1, 0, 0, GemmKind::kFprop, Operand::kA}, ck{1, 0, 0, GemmKind::kWgrad, Operand::kB};
  const at::Tensor x = fp8_test_input(512, 256, 5, false, 0.01f).to(at::kBFloat16).to(at::kCUDA);
  const at::Tensor state = delayed_state(kNoAmax, kNoAmax, kNoAmax);
  const AxisQuantization rows = delayed_axis(e4m3, rk, state, 0, 0);
  const AxisQuantization cols = delayed_axis(e4m3, ck, state, 1, 0);
  at::cuda::CUDAGraph graph;
  Fp8Codes captured;
  const at::cuda::CUDAStream side = at::cuda::getStreamFromPool();
  {
    const c10::cuda::CUDAStreamGuard on_side(side);
    (void)fp8_quantize(x, &rows, &cols);  // warm-up outside the capture
    graph.capture_begin();
    captured = fp8_quantize(x, &rows, &cols);
    graph.capture_end();
  }
  for (const int32_t window : {kNoAmax, amax_bits(0.25f), amax_bits(100.0f)}) {
    INFO("window " << window);
    state.copy_(delayed_state(window, window, kNoAmax));  // written between replays, as the trainer does
    graph.replay();
    at::cuda::getCurrentCUDAStream().synchronize();
    side.synchronize();
    const RefDelayed want_rows = reference_delayed(x.cpu(), Axis::kRows, e4m3, rk, window, kNoAmax, 0);
    const RefDelayed want_cols = reference_delayed(x.cpu(), Axis::kCols, e4m3, ck, window, kNoAmax, 0);
    CHECK(code_bytes(captured.rows) == want_rows.codes.codes);
    CHECK(code_bytes(captured.cols) == want_cols.codes.codes);
    CHECK(same_float_bits(captured.rows_scale, want_rows.codes.scale));
    CHECK(state.cpu()[2].item<int32_t>() == want_rows.record);
    CHECK(state.cpu()[3].item<int32_t>() == want_cols.record);
  }
}

TEST_CASE("the GPU quantizers refuse delayed scaling where it does not apply", "[gpu][torch][fp8][delayed]") {
  const at::Tensor x = at::ones({64, 64}, at::TensorOptions(at::kCUDA).dtype(at::kBFloat16));
  const at::Tensor state = delayed_state(kNoAmax, kNoAmax, kNoAmax);
  const auto message = [&](const QuantSpec& spec, int margin) {
    try {
      const AxisQuantization q = delayed_axis(spec, {}, state, 0, margin);
      (void)fake_quantize(x, Axis::kRows, q);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(message({QuantFormat::kMXFP4}, 0) ==
        "quantize along rows: delayed scaling applies to fp8-e4m3 and fp8-e5m2 only, got mxfp4");
  CHECK(message({QuantFormat::kFP8E4M3}, 9) == "quantize along rows: delayed scaling's margin must be in [0, 8], got 9");
  CHECK(message({QuantFormat::kFP8E4M3}, 8) == "no error");
}
