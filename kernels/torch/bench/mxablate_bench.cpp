// mxablate-bench: the kernel runtime's performance as ratios measured in one run on one GPU.
//
//   1. the ceiling: device-to-device copy bandwidth (bytes read + written);
//   2. each fused quantize configuration: time, GB/s for the bytes it must move (input read
//      once, outputs written once), fraction of the copy ceiling, and speed-up over the
//      composite-operator emulation (LibTorch tensor ops) of the same function;
//   3. the fused common-path ops (RMSNorm, SwiGLU, RoPE, cross-entropy; fused_ops_bench.cpp)
//      against the unfused LibTorch ops they replace;
//   4. GEMMs: BF16 cuBLAS vs the exact emulation vs the Hopper FP8 path, at 4096³, 8192³ and
//      the layer shapes of a ~125 M-parameter model (M = 16384 tokens, K/N in {768, 3072}, and
//      Wgrad's K = tokens), each path timed with its quantization (quantize + GEMM);
//   5. the FP8 arm (per-tensor E4M3/E5M2): the exact emulation vs FP8 tensor cores
//      (fp8-tensorwise, quantize + GEMM) vs the FP8 GEMM alone, at the same shapes.
//
// Usage: mxablate-bench [--quick] [--markdown FILE] [--only CONFIG] [--no-gemm]
//   --only CONFIG runs that quantize configuration alone (by its table name; for profiling).
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime.h>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "fused_ops_bench.h"
#include "mxablate/kernels/gpu/fp8_cast_gpu.h"
#include "mxablate/kernels/gpu/quantize_gpu.h"
#include "mxablate/kernels/torch/composite_emulation.h"
#include "mxablate/kernels/torch/fp8_gemm.h"
#include "mxablate/kernels/torch/gemm_engine.h"
#include "mxablate/kernels/torch/quantized_gemm.h"

namespace mk = mxablate::kernels;
namespace gpu = mxablate::kernels::gpu;

namespace {

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Median time of `fn` in milliseconds, from CUDA events on the current stream, after warm-up.
double median_ms(const std::function<void()>& fn, int reps) {
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  cudaEvent_t start, stop;
  cuda_check(cudaEventCreate(&start), "cudaEventCreate");
  cuda_check(cudaEventCreate(&stop), "cudaEventCreate");
  for (int i = 0; i < 3; ++i) fn();
  std::vector<float> times;
  for (int i = 0; i < reps; ++i) {
    cuda_check(cudaEventRecord(start, stream), "cudaEventRecord");
    fn();
    cuda_check(cudaEventRecord(stop, stream), "cudaEventRecord");
    cuda_check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    cuda_check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

using mxablate::bench::fixed;

struct Report {
  std::ostringstream md;
  void line(const std::string& s) {
    std::cout << s << "\n";
    md << s << "\n";
  }
};

// ---- 1. copy ceiling --------------------------------------------------------------------

double copy_bandwidth_gbs(int reps) {
  const at::Tensor src = at::randn({1 << 28}, at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16));
  at::Tensor dst = at::empty_like(src);
  const double ms = median_ms([&] { dst.copy_(src); }, reps);
  return 2.0 * static_cast<double>(src.nbytes()) / (ms * 1e-3) / 1e9;
}

// ---- 2. quantize configurations ---------------------------------------------------------

struct AxisSetup {
  mk::Axis axis;
  mk::QuantSpec spec;
  enum Output { kFakeQuant, kPacked, kFp8 } output = kFakeQuant;
};

struct QuantConfig {
  std::string name;
  at::ScalarType dtype;  // input, and fake-quant output
  std::vector<AxisSetup> axes;
  bool telemetry = false;
  // The FP8 arm's fast cast (fp8_cast_gpu.h) instead of the general quantizer: FP8 codes only.
  bool fast_fp8 = false;
};

// Device outputs of one axis, allocated once and reused by every timed call.
struct AxisOutputs {
  std::vector<at::Tensor> keep;
  gpu::AxisOutputs out;
  double bytes = 0;  // bytes this axis must write
};

AxisOutputs allocate_outputs(const at::Tensor& x, const AxisSetup& a, at::Tensor& telemetry) {
  AxisOutputs o;
  const int64_t rows = x.size(0), cols = x.size(1), n = x.numel();
  const int64_t lines = a.axis == mk::Axis::kRows ? rows : cols, length = n / lines;
  const auto bytes = x.options().dtype(at::kByte);
  if (a.output == AxisSetup::kFakeQuant) {
    o.keep.push_back(at::empty_like(x));
    if (x.scalar_type() == at::kFloat) {
      o.out.dequant = o.keep.back().data_ptr<float>();
    } else {
      o.out.dequant_bf16 = reinterpret_cast<uint16_t*>(o.keep.back().data_ptr<at::BFloat16>());
    }
    o.bytes = static_cast<double>(x.nbytes());
  } else if (a.output == AxisSetup::kPacked) {
    o.keep.push_back(at::empty({static_cast<int64_t>(mk::packed_bytes(a.spec.format, rows, cols))}, bytes));
    o.out.packed = o.keep.back().data_ptr<uint8_t>();
    o.bytes += static_cast<double>(o.keep.back().nbytes());
    if (mk::block_size(a.spec.format) != 0) {
      o.keep.push_back(at::empty({static_cast<int64_t>(mk::scale_bytes(a.spec.format, rows, cols))}, bytes));
      o.out.scales = o.keep.back().data_ptr<uint8_t>();
      o.bytes += static_cast<double>(o.keep.back().nbytes());
    }
  } else {
    o.keep.push_back(at::empty({n}, bytes));
    o.out.fp8_codes = o.keep.back().data_ptr<uint8_t>();
    o.keep.push_back(at::empty({lines * (length / 128)}, x.options().dtype(at::kFloat)));
    o.out.fp8_scales = o.keep.back().data_ptr<float>();
    o.bytes = static_cast<double>(n) + 4.0 * static_cast<double>(lines * (length / 128));
  }
  if (telemetry.defined()) o.out.telemetry = reinterpret_cast<gpu::DeviceTelemetry*>(telemetry.data_ptr());
  return o;
}

struct QuantResult {
  double ms, gbs, fraction, composite_ms;
};

QuantResult run_quant_config(const QuantConfig& c, const at::Tensor& x, double copy_gbs, int reps) {
  at::Tensor workspace = at::empty({static_cast<int64_t>(gpu::workspace_bytes())}, x.options().dtype(at::kByte));
  at::Tensor telemetry;
  if (c.telemetry) telemetry = at::zeros({2 * static_cast<int64_t>(sizeof(gpu::DeviceTelemetry))}, x.options().dtype(at::kByte));
  std::vector<AxisOutputs> outputs;
  std::vector<gpu::AxisJob> jobs(c.axes.size());
  gpu::QuantizeJob job;
  job.input = x.data_ptr();
  job.input_type = x.scalar_type() == at::kFloat ? gpu::InputType::kFloat32 : gpu::InputType::kBFloat16;
  job.rows = x.size(0);
  job.cols = x.size(1);
  job.workspace = workspace.data_ptr();
  double bytes = static_cast<double>(x.nbytes());
  for (size_t i = 0; i < c.axes.size(); ++i) {
    outputs.push_back(allocate_outputs(x, c.axes[i], telemetry));
    bytes += outputs.back().bytes;
    jobs[i] = {c.axes[i].spec, {1, 2, 3, mk::GemmKind::kWgrad, mk::Operand::kA}, outputs.back().out};
    (c.axes[i].axis == mk::Axis::kRows ? job.along_rows : job.down_cols) = &jobs[i];
  }
  void* stream = at::cuda::getCurrentCUDAStream().stream();
  std::vector<gpu::Fp8CastAxis> cast_axes(c.axes.size());
  gpu::Fp8CastJob cast{job.input, job.input_type, job.rows, job.cols, nullptr, nullptr, workspace.data_ptr()};
  at::Tensor decode_scales = at::empty({8}, x.options().dtype(at::kFloat));
  for (size_t i = 0; c.fast_fp8 && i < c.axes.size(); ++i) {
    cast_axes[i] = {c.axes[i].spec, jobs[i].out.packed, decode_scales.data_ptr<float>() + 4 * i};
    (c.axes[i].axis == mk::Axis::kRows ? cast.along_rows : cast.down_cols) = &cast_axes[i];
  }
  const double ms = c.fast_fp8 ? median_ms([&] { gpu::fp8_cast(cast, stream); }, reps)
                               : median_ms([&] { gpu::quantize(job, stream); }, reps);
  const double composite_ms = median_ms(
      [&] {
        for (const AxisSetup& a : c.axes) (void)mk::composite_fake_quantize(x, a.axis, a.spec, {1, 2, 3});
      },
      std::max(3, reps / 4));
  const double gbs = bytes / (ms * 1e-3) / 1e9;
  return {ms, gbs, gbs / copy_gbs, composite_ms};
}

std::vector<QuantConfig> quant_configs() {
  using mk::Axis;
  using mk::HadamardMode;
  using mk::QuantFormat;
  using mk::Rounding;
  using mk::ScaleRule;
  const mk::QuantSpec mx{QuantFormat::kMXFP4};
  const mk::QuantSpec mx_sr{QuantFormat::kMXFP4, ScaleRule::kFloor, Rounding::kStochastic};
  const mk::QuantSpec mx_h16{QuantFormat::kMXFP4, ScaleRule::kFloor, Rounding::kNearest, HadamardMode::kDeterministic, 16};
  const mk::QuantSpec mx_h128{QuantFormat::kMXFP4, ScaleRule::kFloor, Rounding::kNearest, HadamardMode::kPerStepRandom, 128};
  const mk::QuantSpec mx_sr_h16{QuantFormat::kMXFP4, ScaleRule::kFloor, Rounding::kStochastic, HadamardMode::kDeterministic, 16};
  const mk::QuantSpec nv{QuantFormat::kNVFP4};
  const mk::QuantSpec e4m3{QuantFormat::kFP8E4M3};
  const mk::QuantSpec e5m2{QuantFormat::kFP8E5M2};
  using O = AxisSetup::Output;
  return {
      {"mxfp4 rows", at::kBFloat16, {{Axis::kRows, mx}}},
      {"mxfp4 cols", at::kBFloat16, {{Axis::kCols, mx}}},
      {"mxfp4 rows+cols (one pass)", at::kBFloat16, {{Axis::kRows, mx}, {Axis::kCols, mx}}},
      {"mxfp4 rows, SR", at::kBFloat16, {{Axis::kRows, mx_sr}}},
      {"mxfp4 cols, SR", at::kBFloat16, {{Axis::kCols, mx_sr}}},
      {"mxfp4 rows, H16", at::kBFloat16, {{Axis::kRows, mx_h16}}},
      {"mxfp4 cols, H16", at::kBFloat16, {{Axis::kCols, mx_h16}}},
      // The MXFP4+H16 arm's X and dY: rows for Fprop / Dgrad, columns rotated for Wgrad.
      {"mxfp4 rows + cols H16 (X, dY)", at::kBFloat16, {{Axis::kRows, mx}, {Axis::kCols, mx_h16}}},
      {"mxfp4 rows, RHT128", at::kBFloat16, {{Axis::kRows, mx_h128}}},
      {"mxfp4 rows + cols SR H16 (dY)", at::kBFloat16, {{Axis::kRows, mx_sr}, {Axis::kCols, mx_sr_h16}}},
      {"mxfp4 rows -> packed+E8M0", at::kBFloat16, {{Axis::kRows, mx, O::kPacked}}},
      {"mxfp4 rows -> E4M3+1x128", at::kBFloat16, {{Axis::kRows, mx, O::kFp8}}},
      {"mxfp4 cols -> E4M3+1x128", at::kBFloat16, {{Axis::kCols, mx, O::kFp8}}},
      {"mxfp4 rows, telemetry", at::kBFloat16, {{Axis::kRows, mx}}, true},
      {"mxfp4 rows, f32 in/out", at::kFloat, {{Axis::kRows, mx}}},
      {"nvfp4 rows (2 passes)", at::kBFloat16, {{Axis::kRows, nv}}},
      {"fp8-e4m3 rows (2 passes)", at::kBFloat16, {{Axis::kRows, e4m3}}},
      // The FP8 arm's quantizer: the amax pass, then codes in one or both layouts a GEMM needs
      // (X: Fprop rows + Wgrad cols; dY in float32: Dgrad rows + Wgrad cols, E5M2).
      {"fp8-e4m3 rows -> codes (2 passes)", at::kBFloat16, {{Axis::kRows, e4m3, O::kPacked}}},
      {"fp8-e4m3 rows+cols -> codes (2 passes)", at::kBFloat16,
       {{Axis::kRows, e4m3, O::kPacked}, {Axis::kCols, e4m3, O::kPacked}}},
      {"fp8-e5m2 rows+cols -> codes, f32 in (2 passes)", at::kFloat,
       {{Axis::kRows, e5m2, O::kPacked}, {Axis::kCols, e5m2, O::kPacked}}},
      // The same through the fast cast the trainer takes (amax pass, then both layouts).
      {"fp8-e4m3 rows -> codes, fast cast", at::kBFloat16, {{Axis::kRows, e4m3, O::kPacked}}, false, true},
      {"fp8-e4m3 rows+cols -> codes, fast cast", at::kBFloat16,
       {{Axis::kRows, e4m3, O::kPacked}, {Axis::kCols, e4m3, O::kPacked}}, false, true},
      {"fp8-e4m3 rows+cols -> codes, f32 in, fast cast", at::kFloat,
       {{Axis::kRows, e4m3, O::kPacked}, {Axis::kCols, e4m3, O::kPacked}}, false, true},
  };
}

// ---- 3. GEMMs ---------------------------------------------------------------------------

struct GemmShape {
  std::string name;
  int64_t m, n, k;
};

double tflops(const GemmShape& s, double ms) { return 2.0 * s.m * s.n * s.k / (ms * 1e-3) / 1e12; }

std::string rate_cell(const GemmShape& s, double ms, double bf16_ms) {
  return fixed(tflops(s, ms), 0) + " (" + fixed(bf16_ms / ms, 2) + "x)";
}

// ---- 4. the FP8 arm's GEMMs -------------------------------------------------------------

// Per-tensor FP8 operands (a E5M2 like dY, b E4M3 like W: Dgrad's pairing; Fprop's E4M3 x E4M3
// runs at the same rate): the exact emulation, FP8 tensor cores with the quantization (amax and
// codes of both operands), and the FP8 GEMM alone on codes made once, with and without cuBLAS's
// fast accumulation (the trainer uses FP32 accumulation).
void fp8_arm_gemms(Report& r, const std::vector<GemmShape>& shapes, int reps) {
  r.line("## GEMM C = A Bᵀ, the FP8 arm: per-tensor E5M2 x E4M3 (TFLOP/s; ratio to BF16 cuBLAS in the same run)");
  r.line("");
  r.line("| shape (M x N x K) | BF16 | exact emulation | fp8-tensorwise (quantize + GEMM) | FP8 GEMM alone | alone, fast accum |");
  r.line("|---|---:|---:|---:|---:|---:|");
  for (const GemmShape& s : shapes) {
    const auto opt = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
    const at::Tensor a = at::randn({s.m, s.k}, opt), b = at::randn({s.n, s.k}, opt);
    const mk::GemmOperand ga{a, mk::Axis::kRows, {mk::QuantFormat::kFP8E5M2}, {1, 0, 0, mk::GemmKind::kDgrad, mk::Operand::kA}};
    const mk::GemmOperand gb{b, mk::Axis::kRows, {mk::QuantFormat::kFP8E4M3}, {1, 0, 0, mk::GemmKind::kDgrad, mk::Operand::kB}};
    const double bf16_ms = median_ms([&] { (void)at::mm(a, b.t()); }, reps);
    const double emu_ms = median_ms([&] { (void)mk::quantized_gemm(ga, gb, mk::GemmPath::kEmulated); }, reps);
    std::string tc_cell = "n/a", alone_cell = "n/a", fast_cell = "n/a";
    const std::string unavailable = mk::gemm_path_unavailable_reason(mk::GemmPath::kFP8Tensorwise, a.device());
    if (unavailable.empty()) {
      const double tc_ms = median_ms([&] { (void)mk::quantized_gemm(ga, gb, mk::GemmPath::kFP8Tensorwise); }, reps);
      const mk::AxisQuantization qa{ga.spec, ga.key}, qb{gb.spec, gb.key};
      const mk::Fp8Codes ca = mk::fp8_quantize(a, &qa, nullptr), cb = mk::fp8_quantize(b, &qb, nullptr);
      const double alone_ms = median_ms(
          [&] { (void)mk::fp8_tensorwise_mm(ca.rows, ca.rows_scale, cb.rows, cb.rows_scale, at::kBFloat16); }, reps);
      const double fast_ms = median_ms(
          [&] {
            (void)at::_scaled_mm(ca.rows, cb.rows.t(), ca.rows_scale, cb.rows_scale, std::nullopt, std::nullopt,
                                 at::kBFloat16, /*use_fast_accum=*/true);
          },
          reps);
      tc_cell = rate_cell(s, tc_ms, bf16_ms);
      alone_cell = rate_cell(s, alone_ms, bf16_ms);
      fast_cell = rate_cell(s, fast_ms, bf16_ms);
    } else {
      std::cerr << "mxablate-bench: fp8-tensorwise skipped: " << unavailable << "\n";
    }
    r.line("| " + s.name + " " + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) +
           " | " + fixed(tflops(s, bf16_ms), 0) + " | " + rate_cell(s, emu_ms, bf16_ms) + " | " + tc_cell + " | " +
           alone_cell + " | " + fast_cell + " |");
  }
}

// "ROWSxCOLS", both positive multiples of 128 (whole tiles, every configuration's blocks) and
// at most 2^16 each; nullopt for anything else.
std::optional<std::pair<int64_t, int64_t>> parse_shape(const std::string& text) {
  const size_t x = text.find('x');
  if (x == std::string::npos) return std::nullopt;
  const auto number = [](const std::string& t) -> int64_t {
    if (t.empty() || t.size() > 5 || t.find_first_not_of("0123456789") != std::string::npos) return 0;
    return std::stoll(t);
  };
  const int64_t rows = number(text.substr(0, x)), cols = number(text.substr(x + 1));
  const auto fits = [](int64_t n) { return n > 0 && n % 128 == 0 && n <= (int64_t{1} << 16); };
  if (!fits(rows) || !fits(cols)) return std::nullopt;
  return std::make_pair(rows, cols);
}

}  // namespace

int main(int argc, char** argv) try {
  bool quick = false, gemms = true;
  std::optional<std::pair<int64_t, int64_t>> quant_shape;  // the quantize table's tensor
  std::string markdown_path, only;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--quick") {
      quick = true;
    } else if (arg == "--markdown" && i + 1 < argc) {
      markdown_path = argv[++i];
    } else if (arg == "--only" && i + 1 < argc) {
      only = argv[++i];
    } else if (arg == "--no-gemm") {
      gemms = false;
    } else if (arg == "--quant-shape" && i + 1 < argc) {
      quant_shape = parse_shape(argv[++i]);
      if (!quant_shape) {
        std::cerr << "mxablate-bench: --quant-shape: \"" << argv[i]
                  << "\" is not ROWSxCOLS with both positive multiples of 128\n";
        return 2;
      }
    } else if (arg == "--help" || arg == "-h") {
      std::cout << "usage: mxablate-bench [--quick] [--markdown FILE] [--only CONFIG] [--no-gemm] "
                   "[--quant-shape ROWSxCOLS]\n";
      return 0;
    } else {
      std::cerr << "mxablate-bench: unknown argument '" << arg << "' (see --help)\n";
      return 2;
    }
  }
  const std::string why = gpu::device_unavailable_reason();
  if (!why.empty()) {
    std::cerr << "mxablate-bench: " << why << "\n";
    return 1;
  }
  const int reps = quick ? 5 : 20;
  const cudaDeviceProp* prop = at::cuda::getCurrentDeviceProperties();
  Report r;
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  r.line("# mxablate-bench, " + std::string(date) + ", " + prop->name + " (" +
         std::to_string(prop->multiProcessorCount) + " SMs), torch " + TORCH_VERSION);
  r.line("");

  const double copy_gbs = copy_bandwidth_gbs(reps);
  r.line("Copy ceiling (bf16, 2^28 elements, read + write): **" + fixed(copy_gbs, 0) + " GB/s**");
  r.line("");

  const int64_t rows = quant_shape ? quant_shape->first : quick ? 4096 : 8192;
  const int64_t cols = quant_shape ? quant_shape->second : quick ? 4096 : 16384;
  r.line("## Fused quantize, " + std::to_string(rows) + " x " + std::to_string(cols) +
         " (bytes = input read once + outputs written once)");
  r.line("");
  r.line("| configuration | ms | GB/s | of copy | composite ms | speed-up |");
  r.line("|---|---:|---:|---:|---:|---:|");
  at::manual_seed(1);
  const at::Tensor x_bf16 = at::randn({rows, cols}, at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16));
  const at::Tensor x_f32 = x_bf16.to(at::kFloat);
  for (const QuantConfig& c : quant_configs()) {
    if (!only.empty() && c.name != only) continue;
    const QuantResult q = run_quant_config(c, c.dtype == at::kFloat ? x_f32 : x_bf16, copy_gbs, reps);
    r.line("| " + c.name + " | " + fixed(q.ms, 3) + " | " + fixed(q.gbs, 0) + " | " + fixed(100 * q.fraction, 1) +
           "% | " + fixed(q.composite_ms, 3) + " | " + fixed(q.composite_ms / q.ms, 1) + "x |");
  }
  r.line("");

  mxablate::bench::fused_ops_bench({[&](const std::function<void()>& fn) { return median_ms(fn, reps); },
                                    [&](const std::string& s) { r.line(s); }, copy_gbs, quick});

  r.line("## GEMM C = A Bᵀ, MXFP4 operands (TFLOP/s; ratio to BF16 cuBLAS in the same run)");
  r.line("");
  r.line("| shape (M x N x K) | BF16 | exact emulation | FP8 path | FP8 GEMM alone | inexact chunks | "
         "mxfp4-as-fp8 | tiles kept from FP8 |");
  r.line("|---|---:|---:|---:|---:|---:|---:|---|");
  const int64_t tokens = 16384;
  std::vector<GemmShape> shapes;
  if (gemms) shapes = {{"4096³", 4096, 4096, 4096},
                                {"8192³", 8192, 8192, 8192},
                                {"125M attn-out (tokens x 768 x 768)", tokens, 768, 768},
                                {"125M MLP-up (tokens x 3072 x 768)", tokens, 3072, 768},
                                {"125M MLP-down (tokens x 768 x 3072)", tokens, 768, 3072},
                                {"125M MLP-up Wgrad (3072 x 768 x tokens)", 3072, 768, tokens}};
  if (quick && shapes.size() > 1) shapes.erase(shapes.begin() + 1);
  for (const GemmShape& s : shapes) {
    const auto opt = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
    const at::Tensor a = at::randn({s.m, s.k}, opt), b = at::randn({s.n, s.k}, opt);
    const mk::GemmOperand ga{a, mk::Axis::kRows, {mk::QuantFormat::kMXFP4}, {1, 0, 0, mk::GemmKind::kFprop, mk::Operand::kA}};
    const mk::GemmOperand gb{b, mk::Axis::kRows, {mk::QuantFormat::kMXFP4}, {1, 0, 0, mk::GemmKind::kFprop, mk::Operand::kB}};
    const double bf16_ms = median_ms([&] { (void)at::mm(a, b.t()); }, reps);
    const double emu_ms = median_ms([&] { (void)mk::quantized_gemm(ga, gb, mk::GemmPath::kEmulated); }, reps);
    std::string fp8_cell = "n/a", fp8_alone_cell = "n/a", inexact_cell = "n/a";
    const std::string unavailable = mk::gemm_path_unavailable_reason(mk::GemmPath::kHopperFP8, a.device());
    if (unavailable.empty()) {
      const double fp8_ms = median_ms([&] { (void)mk::quantized_gemm(ga, gb, mk::GemmPath::kHopperFP8); }, reps);
      mk::GemmReport report;
      (void)mk::quantized_gemm(ga, gb, mk::GemmPath::kHopperFP8, &report);
      // The FP8 GEMM alone, on operands quantized once: E4M3 with 1x128 scales.
      const at::Tensor a8 = a.to(at::kFloat8_e4m3fn), b8 = b.to(at::kFloat8_e4m3fn);
      const at::Tensor sa = at::ones({s.k / 128, s.m}, a.options().dtype(at::kFloat)).t();
      const at::Tensor sb = at::ones({s.k / 128, s.n}, a.options().dtype(at::kFloat));
      const double alone_ms = median_ms(
          [&] { (void)at::_scaled_mm(a8, b8.t(), sa, sb, std::nullopt, std::nullopt, at::kBFloat16, false); }, reps);
      fp8_cell = fixed(tflops(s, fp8_ms), 0) + " (" + fixed(bf16_ms / fp8_ms, 2) + "x)";
      fp8_alone_cell = fixed(tflops(s, alone_ms), 0) + " (" + fixed(bf16_ms / alone_ms, 2) + "x)";
      inexact_cell = std::to_string(report.fp8_inexact_chunks) + " / " + std::to_string(report.fp8_chunks);
    } else {
      std::cerr << "mxablate-bench: FP8 path skipped: " << unavailable << "\n";
    }
    // mxfp4-as-fp8: both operands quantized and re-expressed at one scale per line, the row-wise
    // FP8 GEMM, then the fix-up of the tiles E4M3 did not hold (decided on the device).
    std::string exact_cell = "n/a", exact_where = "n/a";
    const std::string as_fp8 = mk::gemm_path_unavailable_reason(mk::GemmPath::kMXFP4AsFP8, a.device());
    if (as_fp8.empty()) {
      const double exact_ms = median_ms([&] { (void)mk::quantized_gemm(ga, gb, mk::GemmPath::kMXFP4AsFP8); }, reps);
      const mk::GemmEngine& engine = mk::gemm_engine(mk::GemmRoute::kMXFP4AsFP8);
      const at::Tensor tiles = at::zeros({2}, a.options().dtype(at::kLong));
      (void)engine.multiply(engine.quantize_operand(ga, nullptr, at::kBFloat16),
                            engine.quantize_operand(gb, nullptr, at::kBFloat16), std::nullopt, &tiles);
      const at::Tensor counted = tiles.cpu();
      exact_cell = fixed(tflops(s, exact_ms), 0) + " (" + fixed(bf16_ms / exact_ms, 2) + "x)";
      exact_where = std::to_string(counted[0].item<int64_t>()) + " of " +
                    std::to_string(counted[0].item<int64_t>() + counted[1].item<int64_t>()) + " tiles";
    } else {
      std::cerr << "mxablate-bench: mxfp4-as-fp8 skipped: " << as_fp8 << "\n";
    }
    r.line("| " + s.name + " " + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) +
           " | " + fixed(tflops(s, bf16_ms), 0) + " | " + fixed(tflops(s, emu_ms), 0) + " (" +
           fixed(bf16_ms / emu_ms, 2) + "x) | " + fp8_cell + " | " + fp8_alone_cell + " | " + inexact_cell + " | " +
           exact_cell + " | " + exact_where + " |");
  }
  r.line("");
  fp8_arm_gemms(r, shapes, reps);
  if (!markdown_path.empty()) {
    std::ofstream out(markdown_path);
    out << r.md.str();
    if (!out) throw std::runtime_error("cannot write " + markdown_path);
  }
  return 0;
} catch (const std::exception& e) {
  std::cerr << "mxablate-bench: " << e.what() << "\n";
  return 1;
}
