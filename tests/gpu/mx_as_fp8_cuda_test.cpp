// The mxfp4-as-fp8 route (docs/design.md §3): the GPU's E4M3 re-expression of MXFP4 at one scale
// per line equals the CPU reference bit for bit (codes, line scales, status, line marks), and so
// do its dequantization and the fix-up after the FP8 GEMM; an exact operand's codes times its
// scales are the emulated engine's values bit for bit, and the engine's product is the
// emulation's within one BF16 rounding, with lines E4M3 cannot hold and without a host
// synchronization (a CUDA graph holds quantize and multiply).
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
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
    std::vector<uint8_t> want_marks(c.lines);
    const Fp8LineStatus want = mx_to_fp8_rowwise_reference(packed.data_ptr<uint8_t>(), scales.data_ptr<uint8_t>(),
                                                           c.lines, c.length, want_codes.data(), want_scales.data(),
                                                           want_marks.data());

    const at::Tensor d_packed = packed.to(at::kCUDA), d_scales = scales.to(at::kCUDA);
    const at::Tensor codes = at::empty({c.lines, c.length}, d_packed.options());
    const at::Tensor line_scales = at::empty({c.lines}, d_packed.options().dtype(at::kFloat));
    const at::Tensor line_max = at::empty({c.lines}, d_packed.options().dtype(at::kInt));
    const at::Tensor words = at::empty({4}, d_packed.options().dtype(at::kInt));
    const at::Tensor marks = at::full({c.lines}, 7, d_packed.options());  // every byte is written
    auto* status = reinterpret_cast<Fp8LineStatus*>(words.data_ptr());
    gpu::mx_as_fp8({d_packed.data_ptr<uint8_t>(), d_scales.data_ptr<uint8_t>(), c.lines, c.length,
                    codes.data_ptr<uint8_t>(), line_scales.data_ptr<float>(),
                    reinterpret_cast<uint32_t*>(line_max.data_ptr<int32_t>()), status, marks.data_ptr<uint8_t>()},
                   at::cuda::getCurrentCUDAStream().stream());
    const at::Tensor host = words.cpu();
    Fp8LineStatus got;
    std::memcpy(&got, host.data_ptr(), sizeof got);
    CHECK(bytes_of(codes) == want_codes);
    CHECK(bytes_of(line_scales) == bytes_of(at::from_blob(want_scales.data(), {c.lines}, at::kFloat)));
    CHECK(got.max_scale_code == want.max_scale_code);
    CHECK(got.min_line_code == want.min_line_code);
    CHECK(got.inexact_blocks == want.inexact_blocks);
    CHECK(bytes_of(marks) == want_marks);
    if (want.inexact_blocks > 0 || c.nan_block)
      CHECK(std::count(want_marks.begin(), want_marks.end(), 1) > 0);  // the marks say something here
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
  gpu::MxAsFp8Job ok{p, p + 256, 2, 64, p + 384, line_scales, line_max, status, p + 560};
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
  gpu::MxAsFp8Job unmarked = ok;
  unmarked.line_inexact = nullptr;
  CHECK(gpu::mx_as_fp8_unsupported_reason(unmarked).find("line-mark") != std::string::npos);
  gpu::MxRowwiseFixupJob fix{p, p + 256, p + 600, status, p, p + 256, p + 600, status, 2, 2, 64};
  fix.c = reinterpret_cast<uint16_t*>(p + 640);
  fix.ldc = 2;
  CHECK(gpu::mx_rowwise_fixup_unsupported_reason(fix).empty());
  gpu::MxRowwiseFixupJob narrow = fix;
  narrow.ldc = 1;
  CHECK(gpu::mx_rowwise_fixup_unsupported_reason(narrow).find("leading dimension") != std::string::npos);
  gpu::MxRowwiseFixupJob odd_k = fix;
  odd_k.k = 48;
  CHECK(gpu::mx_rowwise_fixup_unsupported_reason(odd_k).find("multiple of 32") != std::string::npos);
  CHECK_THROWS_AS(gpu::mx_rowwise_fixup(odd_k, nullptr), std::invalid_argument);
}

namespace {

struct HostFixupOperand {
  std::vector<uint8_t> packed, scales, marks;
  Fp8LineStatus status;
};

HostFixupOperand host_operand(const QuantizedOperand& q) {
  HostFixupOperand h{bytes_of(q.mx.packed), bytes_of(q.mx.block_scales), bytes_of(q.mx.line_inexact), {}};
  const std::vector<uint8_t> words = bytes_of(q.mx.status);
  std::memcpy(&h.status, words.data(), sizeof h.status);
  return h;
}

// What the engine's product must be: the FP8 GEMM's output `c` with the reference's fix-up
// applied on the host; `tiles` gets the reference's counts.
std::vector<uint8_t> fixed_on_host(const QuantizedOperand& a, const QuantizedOperand& b, const at::Tensor& c,
                                   float fold, uint64_t tiles[2]) {
  const HostFixupOperand ha = host_operand(a), hb = host_operand(b);
  std::vector<uint8_t> out = bytes_of(c);
  mx_rowwise_fixup_reference(ha.packed.data(), ha.scales.data(), ha.marks.data(), ha.status, hb.packed.data(),
                             hb.scales.data(), hb.marks.data(), hb.status, a.outer(), b.outer(), a.reduction(), fold,
                             std::log2(static_cast<double>(fold)), reinterpret_cast<uint16_t*>(out.data()), b.outer(),
                             tiles);
  return out;
}

}  // namespace

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
      CHECK(q->mx.line_inexact.sum().item<int64_t>() == 0);
      const at::Tensor values = (q->data.to(at::kFloat) * q->scale.view({-1, 1})).to(at::kBFloat16);
      CHECK(at::equal(values, e->data));  // bit for bit: the re-expression is lossless
    }
    REQUIRE(mxfp4_as_fp8_shape_fits(m, n, k));
    // FP8 tensor cores sum the same exact products in FP32 (no fast accumulation): the product
    // agrees with the emulation's to its one BF16 rounding, whatever the summation order does.
    // Every line is exact: the fix-up keeps every tile.
    const at::Tensor tiles = at::zeros({2}, at::TensorOptions().dtype(at::kLong).device(at::kCUDA));
    const at::Tensor got = exact.multiply(qx.rows, qw, std::nullopt, &tiles).to(at::kDouble).cpu();
    CHECK(tiles.cpu()[0].item<int64_t>() == (m / kFixupTile) * (n / kFixupTile));
    CHECK(tiles.cpu()[1].item<int64_t>() == 0);
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
    const at::Tensor wgrad = exact.multiply(qdy, qx.cols).to(at::kDouble).cpu();
    const at::Tensor wgrad_truth = (at::mm(edy.data.to(at::kDouble), ex.cols.data.to(at::kDouble).t()) *
                                    static_cast<double>(sr_prescale_fold(spec, spec))).cpu();
    CHECK(((wgrad - wgrad_truth).abs().max().item<double>()) <= std::ldexp(wgrad_truth.abs().max().item<double>(), -8));
    CHECK(wgrad.eq(emulated.multiply(edy, ex.cols).to(at::kDouble).cpu()).to(at::kDouble).mean().item<double>() > 0.95);
  }
}

TEST_CASE("mxfp4-as-fp8 recomputes on the device the tiles whose lines E4M3 cannot hold", "[gpu][torch][mx_as_fp8][gemm]") {
  const std::string unavailable = route_unavailable();
  if (!unavailable.empty()) MXABLATE_SKIP("mxfp4-as-fp8 not run: " << unavailable);
  const GemmEngine& exact = gemm_engine(GemmRoute::kMXFP4AsFP8);
  const GemmEngine& emulated = gemm_engine(GemmRoute::kEmulated);
  for (const QuantSpec& spec : {mxfp4(), mxfp4(Rounding::kStochastic)}) {
    INFO("rounding " << to_string(spec.rounding));
    // Row 7's first block is 2^-20 times the rest of its row: 20 binades below its line's largest.
    // m = 256 and n = 192: 4 x 3 tiles, and row 7 makes the three of the first tile row recomputed.
    at::Tensor x = activation(256, 128, 9, 1.0f);
    x.select(0, 7).narrow(0, 0, 32).mul_(std::ldexp(1.0f, -20));
    const at::Tensor w = activation(192, 128, 10, 1.0f);
    const AxisQuantization xa{spec, {1, 1, 0, GemmKind::kFprop, Operand::kA}};
    const AxisQuantization wa{spec, {1, 1, 0, GemmKind::kFprop, Operand::kB}};
    const QuantizedOperand qx = exact.quantize_operand({x, Axis::kRows, spec, xa.key}, nullptr, at::kBFloat16);
    const QuantizedOperand qw = exact.quantize_operand({w, Axis::kRows, spec, wa.key}, nullptr, at::kBFloat16);
    const QuantizedOperand ex = emulated.quantize_operand({x, Axis::kRows, spec, xa.key}, nullptr, at::kBFloat16);
    const QuantizedOperand ew = emulated.quantize_operand({w, Axis::kRows, spec, wa.key}, nullptr, at::kBFloat16);
    REQUIRE(qx.form == QuantizedOperand::Form::kFP8Rowwise);
    const at::Tensor marks = qx.mx.line_inexact.cpu();
    CHECK(marks[7].item<int64_t>() == 1);
    CHECK(marks.sum().item<int64_t>() == 1);
    const float fold = sr_prescale_fold(spec, spec);

    const at::Tensor tiles = at::zeros({2}, at::TensorOptions().dtype(at::kLong).device(at::kCUDA));
    const at::Tensor got = exact.multiply(qx, qw, std::nullopt, &tiles);
    CHECK(tiles.cpu()[0].item<int64_t>() == 9);
    CHECK(tiles.cpu()[1].item<int64_t>() == 3);
    // Bit for bit the FP8 GEMM's output with the reference's fix-up: recompute the FP8 GEMM's
    // output by hand (the engine without the fix-up is not reachable, so from its kept tiles).
    uint64_t want_tiles[2] = {0, 0};
    CHECK(fixed_on_host(qx, qw, got, fold, want_tiles) == bytes_of(got));  // the reference leaves kept tiles alone
    CHECK(want_tiles[0] == 9);
    CHECK(want_tiles[1] == 3);
    // Against the float64 product of the emulation's values: within one BF16 rounding everywhere,
    // row 7 included (the FP8 GEMM alone would have lost its first block).
    const at::Tensor truth = (at::mm(ex.data.to(at::kDouble), ew.data.to(at::kDouble).t()) * static_cast<double>(fold)).cpu();
    const at::Tensor err = (got.to(at::kDouble).cpu() - truth).abs();
    const at::Tensor bound = truth.abs().mul(std::ldexp(1.0, -8)).add(1e-30);
    CHECK(err.le(bound).all().item<bool>());
    // The tiles of row 7 are the emulation's values summed in order: bit for bit the CPU's
    // float32 sum of the same values.
    const at::Tensor first_rows = got.narrow(0, 0, kFixupTile).contiguous().cpu().view(at::kShort);
    const at::Tensor xs = ex.data.narrow(0, 0, kFixupTile).to(at::kFloat).contiguous().cpu();
    const at::Tensor ws = ew.data.to(at::kFloat).contiguous().cpu();
    const float* xp = xs.data_ptr<float>();
    const float* wp = ws.data_ptr<float>();
    const int16_t* gp = first_rows.data_ptr<int16_t>();
    int64_t differ = 0;
    for (int64_t i = 0; i < kFixupTile; ++i)
      for (int64_t j = 0; j < 192; ++j) {
        float acc = 0.0f;
        for (int64_t t = 0; t < 128; ++t) acc += xp[i * 128 + t] * wp[j * 128 + t];
        const float v = fold == 1.0f ? acc : acc * fold;
        differ += float_to_bf16_bits(v) != static_cast<uint16_t>(gp[i * 192 + j]) ? 1 : 0;
      }
    CHECK(differ == 0);
    // Shapes the FP8 GEMM does not take multiply the values: the emulation's product bit for bit.
    const at::Tensor w40 = activation(40, 128, 11, 1.0f);
    const QuantizedOperand q40 = exact.quantize_operand({w40, Axis::kRows, spec, wa.key}, nullptr, at::kBFloat16);
    const QuantizedOperand e40 = emulated.quantize_operand({w40, Axis::kRows, spec, wa.key}, nullptr, at::kBFloat16);
    CHECK_FALSE(mxfp4_as_fp8_shape_fits(256, 40, 128));
    CHECK(at::equal(exact.multiply(qx, q40), emulated.multiply(ex, e40)));
  }
}

TEST_CASE("mxfp4-as-fp8's quantize and multiply run inside a CUDA graph: no host synchronization", "[gpu][torch][mx_as_fp8][gemm]") {
  const std::string unavailable = route_unavailable();
  if (!unavailable.empty()) MXABLATE_SKIP("mxfp4-as-fp8 not run: " << unavailable);
  const GemmEngine& exact = gemm_engine(GemmRoute::kMXFP4AsFP8);
  const QuantSpec spec = mxfp4(Rounding::kStochastic, HadamardMode::kPerStepRandom);
  at::Tensor x = activation(256, 256, 12, 1.0f);
  x.select(0, 70).narrow(0, 0, 32).mul_(std::ldexp(1.0f, -20));  // one recomputed tile row
  const at::Tensor w = activation(128, 256, 13, 1.0f);
  const AxisQuantization xa{spec, {2, 3, 0, GemmKind::kFprop, Operand::kA}};
  const AxisQuantization wa{spec, {2, 3, 0, GemmKind::kFprop, Operand::kB}};
  const auto step = [&](const at::Tensor* tiles) {
    const QuantizedOperand qx = exact.quantize_operand({x, Axis::kRows, spec, xa.key}, nullptr, at::kBFloat16);
    const QuantizedOperand qw = exact.quantize_operand({w, Axis::kRows, spec, wa.key}, nullptr, at::kBFloat16);
    return exact.multiply(qx, qw, std::nullopt, tiles);
  };
  const at::Tensor tiles = at::zeros({2}, at::TensorOptions().dtype(at::kLong).device(at::kCUDA));
  at::cuda::CUDAGraph graph;
  at::Tensor captured;
  const at::cuda::CUDAStream side = at::cuda::getStreamFromPool();
  at::Tensor eager;
  {
    const c10::cuda::CUDAStreamGuard on_side(side);
    eager = step(nullptr).clone();  // warm-up outside the capture (cuBLASLt's workspace, the allocator)
    side.synchronize();
    graph.capture_begin();
    captured = step(&tiles);  // a read-back inside would end the capture with an error
    graph.capture_end();
  }
  for (int replay = 0; replay < 2; ++replay) {
    graph.replay();
    side.synchronize();
    CHECK(at::equal(captured, eager));
  }
  // Two replays, 4 x 2 tiles each, the tile row of line 70 recomputed.
  CHECK(tiles.cpu()[0].item<int64_t>() == 2 * 6);
  CHECK(tiles.cpu()[1].item<int64_t>() == 2 * 2);
}
