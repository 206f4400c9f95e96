// The mxfp4-as-fp8 route (docs/design.md §3): the GPU's E4M3 re-expression of MXFP4 at one scale
// per line equals the CPU reference bit for bit (codes, line scales, status), and so does its
// dequantization; an exact operand's codes times its scales are the emulated engine's values bit
// for bit, an inexact one becomes those values, and the engine's product is the emulation's: bit
// for bit where it multiplies values, within one BF16 rounding where FP8 tensor cores sum the
// products.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "catch.h"
#include "mxablate/kernels/gpu/mx_as_fp8_gpu.h"
#include "mxablate/kernels/torch/gemm_engine.h"
#include "reference.h"
#include "segment_quant.h"

using namespace mxablate::kernels;

namespace {

std::vector<uint8_t> bytes_of(const at::Tensor& t) {
  const at::Tensor host = t.cpu().contiguous().view(at::kByte);
  const auto* p = host.data_ptr<uint8_t>();
  return std::vector<uint8_t>(p, p + host.numel());
}

std::string route_unavailable() {
  return gemm_route_unavailable_reason(GemmRoute::kMXFP4AsFP8, at::Device(at::kCUDA, 0));
}

// Activations with an outlier column, as a layer's input looks.
at::Tensor activation(int64_t rows, int64_t cols, uint64_t seed, float outlier = 30.0f) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  at::Tensor x = at::randn({rows, cols}, gen, at::TensorOptions().dtype(at::kFloat));
  x.select(1, 5).mul_(outlier);
  return x.to(at::kBFloat16).to(at::kCUDA);
}

QuantSpec mxfp4(Rounding r = Rounding::kNearest, HadamardMode h = HadamardMode::kNone) {
  QuantSpec s{QuantFormat::kMXFP4, ScaleRule::kFloor, r};
  s.hadamard = h;
  s.hadamard_size = 16;
  if (r == Rounding::kStochastic) s.sr_prescale = 0.75f;
  return s;
}

}  // namespace

TEST_CASE("MXFP4 as E4M3 on the GPU writes the reference's codes, line scales and status", "[gpu][mx_as_fp8]") {
  struct Case {
    int64_t lines, length;
    int low, high;  // block scale codes drawn from [low, high]
    bool nan_block;
  };
  // In every window; 40 binades wide (inexact blocks, lines under the floor); a NaN block; block
  // counts that are no multiple of 256 (a partial thread block), lines of 1 and of 512 blocks.
  const std::vector<Case> cases{{64, 256, 113, 127, false}, {33, 96, 100, 140, false}, {7, 32, 120, 121, true},
                                {3, 32, 126, 127, false},   {257, 64, 90, 130, false}, {16, 16384, 110, 124, false}};
  uint64_t seed = 1;
  for (const Case& c : cases) {
    INFO(c.lines << " x " << c.length << ", scales in [" << c.low << ", " << c.high << "]");
    const int64_t blocks = c.lines * c.length / 32;
    at::Generator gen = at::detail::createCPUGenerator(seed++);
    const at::Tensor packed = at::randint(0, 256, {c.lines, c.length / 2}, gen, at::kInt).to(at::kByte);
    at::Tensor scales = at::randint(c.low, c.high + 1, {c.lines, c.length / 32}, gen, at::kInt).to(at::kByte);
    if (c.nan_block) scales.view({-1})[blocks / 2].fill_(static_cast<int64_t>(kE8M0NaN));
    std::vector<uint8_t> want_codes(c.lines * c.length);
    std::vector<float> want_scales(c.lines);
    const Fp8LineStatus want = mx_to_fp8_rowwise_reference(packed.data_ptr<uint8_t>(), scales.data_ptr<uint8_t>(),
                                                           c.lines, c.length, want_codes.data(), want_scales.data());

    const at::Tensor d_packed = packed.to(at::kCUDA), d_scales = scales.to(at::kCUDA);
    const at::Tensor codes = at::empty({c.lines, c.length}, d_packed.options());
    const at::Tensor line_scales = at::empty({c.lines}, d_packed.options().dtype(at::kFloat));
    const at::Tensor line_max = at::empty({c.lines}, d_packed.options().dtype(at::kInt));
    const at::Tensor words = at::empty({4}, d_packed.options().dtype(at::kInt));
    auto* status = reinterpret_cast<Fp8LineStatus*>(words.data_ptr());
    gpu::mx_as_fp8({d_packed.data_ptr<uint8_t>(), d_scales.data_ptr<uint8_t>(), c.lines, c.length,
                    codes.data_ptr<uint8_t>(), line_scales.data_ptr<float>(),
                    reinterpret_cast<uint32_t*>(line_max.data_ptr<int32_t>()), status},
                   at::cuda::getCurrentCUDAStream().stream());
    const at::Tensor host = words.cpu();
    Fp8LineStatus got;
    std::memcpy(&got, host.data_ptr(), sizeof got);
    CHECK(bytes_of(codes) == want_codes);
    CHECK(bytes_of(line_scales) == bytes_of(at::from_blob(want_scales.data(), {c.lines}, at::kFloat)));
    CHECK(got.max_scale_code == want.max_scale_code);
    CHECK(got.min_line_code == want.min_line_code);
    CHECK(got.inexact_blocks == want.inexact_blocks);
    if (c.high - c.low > 14 && !c.nan_block) CHECK(want.inexact_blocks > 0);  // the case tests what it says
    if (c.high - c.low <= 14 && !c.nan_block) CHECK(want.exact());

    // The values of the same codes, as the quantizer writes them (bf16 and float32 outputs).
    const at::Tensor bf16 = at::empty({c.lines, c.length}, d_packed.options().dtype(at::kBFloat16));
    const at::Tensor f32 = at::empty({c.lines, c.length}, d_packed.options().dtype(at::kFloat));
    gpu::mx_dequantize({d_packed.data_ptr<uint8_t>(), d_scales.data_ptr<uint8_t>(), blocks,
                        reinterpret_cast<uint16_t*>(bf16.data_ptr<at::BFloat16>()), nullptr},
                       at::cuda::getCurrentCUDAStream().stream());
    gpu::mx_dequantize({d_packed.data_ptr<uint8_t>(), d_scales.data_ptr<uint8_t>(), blocks, nullptr,
                        f32.data_ptr<float>()},
                       at::cuda::getCurrentCUDAStream().stream());
    std::vector<float> want_values(c.lines * c.length);
    std::vector<uint16_t> want_bf16(c.lines * c.length);
    for (int64_t i = 0; i < c.lines * c.length; ++i) {
      const float v = mx_dequant((packed.data_ptr<uint8_t>()[i / 2] >> (4 * (i % 2))) & 0xF,
                                 scales.data_ptr<uint8_t>()[i / 32]);
      want_values[i] = gpu::detail::dequant_f32(v);
      want_bf16[i] = gpu::detail::dequant_bf16_bits<QuantFormat::kMXFP4>(v);
    }
    const at::Tensor want_f32 = at::from_blob(want_values.data(), {c.lines, c.length}, at::kFloat);
    CHECK(bytes_of(f32) == bytes_of(want_f32));
    CHECK(bytes_of(bf16) == bytes_of(at::from_blob(want_bf16.data(), {c.lines, c.length}, at::kShort)));
    CHECK(at::equal(bf16.cpu().to(at::kFloat).nan_to_num(0), want_f32.nan_to_num(0)));  // exact in bf16
  }
}

TEST_CASE("MXFP4 as E4M3 says in one sentence what it does not take", "[gpu][mx_as_fp8]") {
  const at::Tensor buf = at::empty({1024}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA));
  uint8_t* p = buf.data_ptr<uint8_t>();
  auto* status = reinterpret_cast<Fp8LineStatus*>(p + 512);
  auto* line_scales = reinterpret_cast<float*>(p + 528);
  auto* line_max = reinterpret_cast<uint32_t*>(p + 544);
  gpu::MxAsFp8Job ok{p, p + 256, 2, 64, p + 384, line_scales, line_max, status};
  CHECK(gpu::mx_as_fp8_unsupported_reason(ok).empty());
  gpu::MxAsFp8Job odd = ok;
  odd.length = 48;
  CHECK(gpu::mx_as_fp8_unsupported_reason(odd).find("multiple of 32") != std::string::npos);
  gpu::MxAsFp8Job unaligned = ok;
  unaligned.codes = p + 385;
  CHECK(gpu::mx_as_fp8_unsupported_reason(unaligned).find("16-byte-aligned code buffer") != std::string::npos);
  CHECK_THROWS_AS(gpu::mx_as_fp8(odd, nullptr), std::invalid_argument);
  gpu::MxDequantizeJob both{p, p + 256, 4, reinterpret_cast<uint16_t*>(p + 512), reinterpret_cast<float*>(p + 768)};
  CHECK(gpu::mx_dequantize_unsupported_reason(both) == "MXFP4 dequantization needs exactly one output");
}

TEST_CASE("mxfp4-as-fp8 operands are the emulated engine's values, and so are its products", "[gpu][torch][mx_as_fp8][gemm]") {
  const std::string unavailable = route_unavailable();
  if (!unavailable.empty()) MXABLATE_SKIP("mxfp4-as-fp8 not run: " << unavailable);
  const GemmEngine& exact = gemm_engine(GemmRoute::kMXFP4AsFP8);
  const GemmEngine& emulated = gemm_engine(GemmRoute::kEmulated);
  const int64_t m = 512, n = 384, k = 256;
  for (const QuantSpec& spec : {mxfp4(), mxfp4(Rounding::kStochastic), mxfp4(Rounding::kNearest, HadamardMode::kPerStepRandom)}) {
    INFO("rounding " << to_string(spec.rounding) << ", hadamard " << to_string(spec.hadamard));
    const at::Tensor x = activation(m, k, 3), w = activation(n, k, 4, 1.0f).to(at::kFloat);
    const AxisQuantization xa{spec, {5, 2, 1, GemmKind::kFprop, Operand::kA}};
    const AxisQuantization xc{spec, {5, 2, 1, GemmKind::kWgrad, Operand::kB}};
    const AxisQuantization wa{spec, {5, 2, 1, GemmKind::kFprop, Operand::kB}};
    const QuantizedAxes qx = exact.quantize(x, &xa, &xc, nullptr, nullptr, at::kBFloat16);
    const QuantizedAxes ex = emulated.quantize(x, &xa, &xc, nullptr, nullptr, at::kBFloat16);
    const QuantizedOperand qw = exact.quantize_operand({w, Axis::kRows, spec, wa.key}, nullptr, at::kBFloat16);
    const QuantizedOperand ew = emulated.quantize_operand({w, Axis::kRows, spec, wa.key}, nullptr, at::kBFloat16);
    // Gaussian data with a 30x outlier column spans far less than 14 binades of block scales.
    for (const auto& [q, e] : {std::pair{&qx.rows, &ex.rows}, std::pair{&qx.cols, &ex.cols}, std::pair{&qw, &ew}}) {
      REQUIRE(q->form == QuantizedOperand::Form::kFP8Rowwise);
      REQUIRE(q->line_scale_log2.has_value());
      CHECK(q->scale.max().item<float>() == std::ldexp(1.0f, q->line_scale_log2->max_log2));
      CHECK(q->scale.min().item<float>() == std::ldexp(1.0f, q->line_scale_log2->min_log2));
      const at::Tensor values = (q->data.to(at::kFloat) * q->scale.view({-1, 1})).to(at::kBFloat16);
      CHECK(at::equal(values, e->data));  // bit for bit: the re-expression is lossless
    }
    REQUIRE(mxfp4_as_fp8_on_tensor_cores(qx.rows, qw));
    // FP8 tensor cores sum the same exact products in FP32 (no fast accumulation): the product
    // agrees with the emulation's to its one BF16 rounding, whatever the summation order does.
    const at::Tensor got = exact.multiply(qx.rows, qw).to(at::kDouble).cpu();
    const at::Tensor want = emulated.multiply(ex.rows, ew).to(at::kDouble).cpu();
    const at::Tensor truth = (at::mm(ex.rows.data.to(at::kDouble), ew.data.to(at::kDouble).t()) *
                              static_cast<double>(sr_prescale_fold(spec, spec))).cpu();
    const double scale = truth.abs().max().item<double>();
    CHECK(((got - truth).abs().max().item<double>()) <= std::ldexp(scale, -8));
    CHECK(((want - truth).abs().max().item<double>()) <= std::ldexp(scale, -8));
    const double equal_share = got.eq(want).to(at::kDouble).mean().item<double>();
    INFO("share of outputs bit-equal to the emulation's: " << equal_share);
    CHECK(equal_share > 0.95);
    // Wgrad's layout: both operands quantized down columns (dYᵀ X), so each multiplies its
    // transposed codes and the column axis's decode scale.
    const at::Tensor dy = activation(m, 128, 6, 1.0f).mul_(1e-4);
    const AxisQuantization dc{spec, {5, 2, 1, GemmKind::kWgrad, Operand::kA}};
    const QuantizedOperand qdy = exact.quantize_operand({dy, Axis::kCols, spec, dc.key}, nullptr, at::kBFloat16);
    const QuantizedOperand edy = emulated.quantize_operand({dy, Axis::kCols, spec, dc.key}, nullptr, at::kBFloat16);
    REQUIRE(qdy.form == QuantizedOperand::Form::kFP8Rowwise);
    REQUIRE(mxfp4_as_fp8_on_tensor_cores(qdy, qx.cols));
    const at::Tensor wgrad = exact.multiply(qdy, qx.cols).to(at::kDouble).cpu();
    const at::Tensor wgrad_truth = (at::mm(edy.data.to(at::kDouble), ex.cols.data.to(at::kDouble).t()) *
                                    static_cast<double>(sr_prescale_fold(spec, spec))).cpu();
    CHECK(((wgrad - wgrad_truth).abs().max().item<double>()) <= std::ldexp(wgrad_truth.abs().max().item<double>(), -8));
    CHECK(wgrad.eq(emulated.multiply(edy, ex.cols).to(at::kDouble).cpu()).to(at::kDouble).mean().item<double>() > 0.95);
  }
}

TEST_CASE("mxfp4-as-fp8 multiplies the MXFP4 values where one scale per tensor cannot hold them", "[gpu][torch][mx_as_fp8][gemm]") {
  const std::string unavailable = route_unavailable();
  if (!unavailable.empty()) MXABLATE_SKIP("mxfp4-as-fp8 not run: " << unavailable);
  const GemmEngine& exact = gemm_engine(GemmRoute::kMXFP4AsFP8);
  const GemmEngine& emulated = gemm_engine(GemmRoute::kEmulated);
  const QuantSpec spec = mxfp4();
  // Row 7's first block is 2^-20 times the rest of its row: 20 binades below its line's largest.
  at::Tensor x = activation(256, 128, 9, 1.0f);
  x.select(0, 7).narrow(0, 0, 32).mul_(std::ldexp(1.0f, -20));
  const at::Tensor w = activation(128, 128, 10, 1.0f);
  const AxisQuantization xa{spec, {1, 1, 0, GemmKind::kFprop, Operand::kA}};
  const AxisQuantization wa{spec, {1, 1, 0, GemmKind::kFprop, Operand::kB}};
  const QuantizedOperand qx = exact.quantize_operand({x, Axis::kRows, spec, xa.key}, nullptr, at::kBFloat16);
  const QuantizedOperand qw = exact.quantize_operand({w, Axis::kRows, spec, wa.key}, nullptr, at::kBFloat16);
  const QuantizedOperand ex = emulated.quantize_operand({x, Axis::kRows, spec, xa.key}, nullptr, at::kBFloat16);
  const QuantizedOperand ew = emulated.quantize_operand({w, Axis::kRows, spec, wa.key}, nullptr, at::kBFloat16);
  CHECK(qx.form == QuantizedOperand::Form::kValues);
  CHECK(at::equal(qx.data, ex.data));
  REQUIRE(qw.form == QuantizedOperand::Form::kFP8Rowwise);
  CHECK_FALSE(mxfp4_as_fp8_on_tensor_cores(qx, qw));
  // Mixed forms: the codes become their values, and the product is the emulation's, bit for bit.
  CHECK(at::equal(exact.multiply(qx, qw), emulated.multiply(ex, ew)));
  CHECK(at::equal(exact.multiply(qw, qx), emulated.multiply(ew, ex)));
}
