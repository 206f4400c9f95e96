// The raw GPU quantizer (mxablate/kernels/gpu/quantize_gpu.h) against the CPU reference, bit for
// bit: every format, rule, rounding, Hadamard mode and size, both axes alone and fused, float32
// and bf16 input, tile-multiple and ragged shapes, inputs with NaN/Inf/zeros/outliers/subnormals.
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "catch.h"
#include "gpu_runtime.h"
#include "mxablate/kernels/gpu/quantize_gpu.h"
#include "reference.h"
#include "segment_quant.h"
#include "test_inputs.h"

using namespace mxablate::kernels;
using namespace mxablate::test;
namespace gpu = mxablate::kernels::gpu;

namespace {

// Device memory that frees itself; filled with a poison byte so unwritten outputs show.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes, int poison = 0x5A) : bytes_(bytes) {
    if (bytes_ == 0) return;
    gpu::check(gpu::gpuMalloc(&ptr_, bytes_), "cudaMalloc");
    std::vector<unsigned char> fill(bytes_, static_cast<unsigned char>(poison));
    gpu::check(gpu::gpuMemcpyToDevice(ptr_, fill.data(), bytes_), "cudaMemcpy");
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr_) gpu::gpuFree(ptr_);
  }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  template <typename T>
  std::vector<T> read() const {
    std::vector<T> host(bytes_ / sizeof(T));
    if (bytes_) gpu::check(gpu::gpuMemcpyToHost(host.data(), ptr_, bytes_), "cudaMemcpy");
    return host;
  }
  template <typename T>
  void write(const std::vector<T>& host) {
    gpu::check(gpu::gpuMemcpyToDevice(ptr_, host.data(), host.size() * sizeof(T)), "cudaMemcpy");
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_;
};

// Every output of one axis, on the device.
struct AxisBuffers {
  DeviceBuffer dequant, dequant_bf16, packed, scales, tensor_scale, fp8_codes, fp8_scales, inexact, telemetry;
  bool want_fp8;
  AxisBuffers(QuantFormat f, int64_t rows, int64_t cols, int64_t lines, int64_t length, bool fp8)
      : dequant(rows * cols * 4), dequant_bf16(rows * cols * 2), packed(packed_bytes(f, rows, cols)),
        scales(scale_bytes(f, rows, cols)), tensor_scale(4), fp8_codes(fp8 ? rows * cols : 0),
        fp8_scales(fp8 ? lines * (length / 128) * 4 : 0), inexact(8, 0), telemetry(sizeof(gpu::DeviceTelemetry), 0),
        want_fp8(fp8) {}

  // All outputs, or the dequantized ones alone (the kernel variant without code arithmetic).
  gpu::AxisOutputs outputs(QuantFormat f, bool with_telemetry, bool dequant_only) const {
    gpu::AxisOutputs o;
    o.dequant = dequant.as<float>();
    o.dequant_bf16 = dequant_bf16.as<uint16_t>();
    if (dequant_only) {
      if (with_telemetry) o.telemetry = telemetry.as<gpu::DeviceTelemetry>();
      return o;
    }
    if (packed_bytes(f, 1, 128) != 0) o.packed = packed.as<uint8_t>();
    if (block_size(f) != 0) o.scales = scales.as<uint8_t>();
    if (element_format(f)) o.tensor_scale = tensor_scale.as<float>();
    if (want_fp8) {
      o.fp8_codes = fp8_codes.as<uint8_t>();
      o.fp8_scales = fp8_scales.as<float>();
      o.fp8_inexact_chunks = inexact.as<unsigned long long>();
    }
    if (with_telemetry) o.telemetry = telemetry.as<gpu::DeviceTelemetry>();
    return o;
  }
};

struct AxisCase {
  Axis axis;
  QuantSpec spec;
  RngKey key;
};

bool wants_fp8(const AxisCase& c, int64_t rows, int64_t cols) {
  return c.spec.format == QuantFormat::kMXFP4 && (c.axis == Axis::kRows ? cols : rows) % 128 == 0;
}

// Runs one GPU call quantizing `x` along the given axes (one or two) and checks each axis
// against the CPU reference on the same (bf16-rounded, if bf16) values.
void check_gpu_call(const std::vector<float>& x32, int64_t rows, int64_t cols, bool bf16_input,
                    const std::vector<AxisCase>& axes, bool with_telemetry, bool dequant_only = false) {
  const std::vector<uint16_t> xb = to_bf16(x32);
  const std::vector<float> x = bf16_input ? bf16_values(xb) : x32;
  DeviceBuffer input(x.size() * (bf16_input ? 2 : 4));
  if (bf16_input) {
    input.write(xb);
  } else {
    input.write(x);
  }
  DeviceBuffer workspace(gpu::workspace_bytes());
  std::vector<std::unique_ptr<AxisBuffers>> buffers;
  std::vector<gpu::AxisJob> jobs(axes.size());
  gpu::QuantizeJob job;
  job.input = input.as<void>();
  job.input_type = bf16_input ? gpu::InputType::kBFloat16 : gpu::InputType::kFloat32;
  job.rows = rows;
  job.cols = cols;
  job.workspace = workspace.as<void>();
  for (size_t i = 0; i < axes.size(); ++i) {
    const AxisCase& c = axes[i];
    const int64_t lines = c.axis == Axis::kRows ? rows : cols, length = c.axis == Axis::kRows ? cols : rows;
    buffers.push_back(std::make_unique<AxisBuffers>(c.spec.format, rows, cols, lines, length,
                                                    !dequant_only && wants_fp8(c, rows, cols)));
    jobs[i] = {c.spec, c.key, buffers.back()->outputs(c.spec.format, with_telemetry, dequant_only)};
    (c.axis == Axis::kRows ? job.along_rows : job.down_cols) = &jobs[i];
  }
  gpu::quantize(job, nullptr);
  gpu::check(gpu::gpuDeviceSynchronize(), "the quantize kernels");

  for (size_t i = 0; i < axes.size(); ++i) {
    const AxisCase& c = axes[i];
    const AxisBuffers& b = *buffers[i];
    INFO(describe(c.spec, c.axis, rows, cols) << (bf16_input ? " bf16 input" : " f32 input")
                                              << (axes.size() == 2 ? " (both axes)" : ""));
    const Expected want = reference_quantize(x.data(), rows, cols, c.axis, c.spec, c.key, b.want_fp8);
    CHECK(first_difference(b.dequant.read<float>(), want.dequant) == -1);
    CHECK(first_difference(b.dequant_bf16.read<uint16_t>(), want.dequant_bf16) == -1);
    if (!dequant_only && !want.packed.empty()) CHECK(first_difference(b.packed.read<uint8_t>(), want.packed) == -1);
    if (!dequant_only && !want.scales.empty()) CHECK(first_difference(b.scales.read<uint8_t>(), want.scales) == -1);
    if (!dequant_only && gpu::detail::is_per_tensor(c.spec.format)) {  // the others leave tensor_scale alone
      const float got_scale = b.tensor_scale.read<float>()[0];
      CHECK(std::memcmp(&got_scale, &want.tensor_scale, 4) == 0);
    }
    if (b.want_fp8) {
      CHECK(first_difference(b.fp8_codes.read<uint8_t>(), want.fp8_codes) == -1);
      CHECK(first_difference(b.fp8_scales.read<float>(), want.fp8_scales) == -1);
      CHECK(static_cast<int64_t>(b.inexact.read<unsigned long long>()[0]) == want.fp8_inexact_chunks);
    }
    if (with_telemetry) {
      std::string why;
      const bool same = telemetry_matches(gpu::to_quant_telemetry(b.telemetry.read<gpu::DeviceTelemetry>()[0]),
                                          want.telemetry, &why);
      INFO(why);
      CHECK(same);
    }
  }
}

struct Shape {
  int64_t rows, cols;
};

}  // namespace

TEST_CASE("GPU quantize equals the CPU reference on every mode, one axis at a time", "[gpu]") {
  const RngKey key{0xC0FFEE1234ull, 77, 11, GemmKind::kWgrad, Operand::kB};
  // Tile multiple; ragged in both directions; columns not a multiple of 4 (scalar loads, and no
  // shared Philox groups down columns); lines of 48 (a 16-block short of a 32-segment).
  const std::vector<Shape> shapes{{128, 256}, {160, 96}, {96, 102}, {64, 48}};
  int call = 0;
  for (Shape s : shapes) {
    for (Specials specials : {Specials::kFiniteOnly, Specials::kAll}) {
      const std::vector<float> x = test_matrix(s.rows, s.cols, 3 + call, specials);
      for (bool bf16_input : {false, true}) {
        for (const QuantSpec& spec : specs_to_sweep()) {
          for (Axis axis : {Axis::kRows, Axis::kCols}) {
            if (!check_shape(spec, s.rows, s.cols, axis).empty()) continue;
            // Telemetry on for every other call, dequantized outputs alone for every third: the
            // outputs must not depend on the kernel variant.
            ++call;
            check_gpu_call(x, s.rows, s.cols, bf16_input, {{axis, spec, key}}, call % 2 == 0, call % 3 == 0);
          }
        }
      }
    }
  }
}

TEST_CASE("GPU quantize of both axes in one pass equals two reference calls", "[gpu]") {
  const std::vector<float> x = test_matrix(384, 512, 99, Specials::kAll);
  const AxisCase fprop{Axis::kRows, {QuantFormat::kMXFP4}, {5, 1, 2, GemmKind::kFprop, Operand::kA}};
  const AxisCase wgrad_h16{Axis::kCols,
                           {QuantFormat::kMXFP4, ScaleRule::kFloor, Rounding::kStochastic, HadamardMode::kDeterministic, 16},
                           {5, 1, 2, GemmKind::kWgrad, Operand::kB}};
  const AxisCase wgrad_rht128{Axis::kCols,
                              {QuantFormat::kMXFP4, ScaleRule::kEven, Rounding::kNearest, HadamardMode::kPerStepRandom, 128},
                              {5, 1, 2, GemmKind::kWgrad, Operand::kB}};
  const AxisCase fp8_cols{Axis::kCols, {QuantFormat::kFP8E5M2, ScaleRule::kFloor, Rounding::kStochastic},
                          {5, 1, 2, GemmKind::kWgrad, Operand::kB}};
  const AxisCase nv_rows{Axis::kRows, {QuantFormat::kNVFP4, ScaleRule::kFloor, Rounding::kNearest, HadamardMode::kFixedRandom, 32},
                         {5, 1, 2, GemmKind::kFprop, Operand::kA}};
  for (bool bf16_input : {false, true}) {
    check_gpu_call(x, 384, 512, bf16_input, {fprop, wgrad_h16}, true);
    check_gpu_call(x, 384, 512, bf16_input, {fprop, wgrad_h16}, false);  // two variants: two launches
    check_gpu_call(x, 384, 512, bf16_input, {fprop, wgrad_rht128}, false);
    check_gpu_call(x, 384, 512, bf16_input, {fprop, wgrad_rht128}, false, true);  // one fused launch
    check_gpu_call(x, 384, 512, bf16_input, {fprop, fp8_cols}, true);  // different formats: two launches
    check_gpu_call(x, 384, 512, bf16_input, {nv_rows, fp8_cols}, true);
  }
}

TEST_CASE("GPU per-tensor formats on both axes: one amax pass when unrotated, one per axis when rotated", "[gpu]") {
  // Unrotated axes of one launch share the amax slot (the FP8 arm's X, W and dY); rotated ones
  // reduce their own rotated values. Ragged shapes, NaN/Inf, zeros and subnormals included.
  const RngKey rows_key{5, 1, 2, GemmKind::kFprop, Operand::kA}, cols_key{5, 1, 2, GemmKind::kWgrad, Operand::kB};
  const QuantSpec e4m3{QuantFormat::kFP8E4M3}, nv{QuantFormat::kNVFP4};
  const QuantSpec e5m2_sr{QuantFormat::kFP8E5M2, ScaleRule::kFloor, Rounding::kStochastic};
  const QuantSpec e4m3_h16{QuantFormat::kFP8E4M3, ScaleRule::kFloor, Rounding::kNearest, HadamardMode::kDeterministic, 16};
  for (const Shape s : {Shape{384, 512}, Shape{160, 96}, Shape{96, 102}}) {
    for (Specials specials : {Specials::kFiniteOnly, Specials::kAll}) {
      const std::vector<float> x = test_matrix(s.rows, s.cols, 41, specials);
      for (bool bf16_input : {false, true}) {
        for (const QuantSpec& spec : {e4m3, e5m2_sr, nv}) {
          if (!check_shape(spec, s.rows, s.cols, Axis::kRows).empty() ||
              !check_shape(spec, s.rows, s.cols, Axis::kCols).empty())
            continue;
          check_gpu_call(x, s.rows, s.cols, bf16_input, {{Axis::kRows, spec, rows_key}, {Axis::kCols, spec, cols_key}}, true);
          check_gpu_call(x, s.rows, s.cols, bf16_input, {{Axis::kRows, spec, rows_key}, {Axis::kCols, spec, cols_key}}, false);
        }
        if (s.rows % 16 == 0 && s.cols % 16 == 0)
          check_gpu_call(x, s.rows, s.cols, bf16_input,
                         {{Axis::kRows, e4m3_h16, rows_key}, {Axis::kCols, e4m3_h16, cols_key}}, false);
      }
    }
  }
}

TEST_CASE("GPU 2-D blocks: W along rows and down columns in one launch, each equal to the reference", "[gpu]") {
  // The CPU tests (tests/kernels/blocks_2d_test.cpp) show that the reference gives both axes the
  // same values; here both axes run in one fused launch (one tile pass shared by the two), with
  // the FP8 re-expression (lines of 256 and 384), staged and unstaged outputs, and next to a 1-D
  // axis in the same launch.
  const RngKey key{0xABCDull, 4, 2, GemmKind::kFprop, Operand::kB};
  for (Specials specials : {Specials::kFiniteOnly, Specials::kAll}) {
    const std::vector<float> x = test_matrix(256, 384, 21, specials);
    for (QuantFormat f : {QuantFormat::kMXFP4, QuantFormat::kNVFP4}) {
      for (Rounding rounding : {Rounding::kNearest, Rounding::kStochastic}) {
        QuantSpec spec{f, ScaleRule::kFloor, rounding};
        spec.blocks = BlockShape::k2D;
        QuantSpec one_d = spec;
        one_d.blocks = BlockShape::k1D;
        const AxisCase rows{Axis::kRows, spec, key}, cols{Axis::kCols, spec, key};
        for (bool bf16_input : {false, true}) {
          check_gpu_call(x, 256, 384, bf16_input, {rows, cols}, true);
          check_gpu_call(x, 256, 384, bf16_input, {rows, cols}, false, true);
          check_gpu_call(x, 256, 384, bf16_input, {rows, {Axis::kCols, one_d, key}}, true);
          check_gpu_call(x, 256, 384, bf16_input, {{Axis::kRows, one_d, key}, cols}, false, true);
        }
      }
    }
  }
}

TEST_CASE("GPU quantize is exact on a large tensor", "[gpu]") {
  const std::vector<float> x = test_matrix(2048, 4096, 5, Specials::kFiniteOnly);
  const AxisCase rows{Axis::kRows, {QuantFormat::kMXFP4, ScaleRule::kFloor, Rounding::kStochastic},
                      {9, 1000, 3, GemmKind::kDgrad, Operand::kA}};
  const AxisCase cols{Axis::kCols,
                      {QuantFormat::kMXFP4, ScaleRule::kFloor, Rounding::kStochastic, HadamardMode::kDeterministic, 16},
                      {9, 1000, 3, GemmKind::kWgrad, Operand::kA}};
  check_gpu_call(x, 2048, 4096, true, {rows, cols}, true);
}

TEST_CASE("GPU quantize refuses jobs outside the contract, in one sentence", "[gpu]") {
  DeviceBuffer input(64 * 96 * 4), out(64 * 96 * 4);
  gpu::AxisJob axis{{QuantFormat::kMXFP4}, {}, {}, {}};
  axis.out.dequant = out.as<float>();
  gpu::QuantizeJob job;
  job.input = input.as<void>();
  job.rows = 64;
  job.cols = 96;
  job.down_cols = &axis;  // 64 rows: fine for MXFP4 down columns
  CHECK_NOTHROW(gpu::quantize(job, nullptr));
  axis.spec.hadamard = HadamardMode::kDeterministic;
  axis.spec.hadamard_size = 128;  // 64 rows is not a multiple of 128
  CHECK_THROWS_AS(gpu::quantize(job, nullptr), std::invalid_argument);
  axis.spec = {QuantFormat::kMXFP4};
  axis.spec.sr_prescale = 0.0f;  // outside [2^-24, 1]
  CHECK_THROWS_AS(gpu::quantize(job, nullptr), std::invalid_argument);
  axis.spec = {QuantFormat::kNVFP4};
  axis.out.fp8_codes = out.as<uint8_t>();
  axis.out.fp8_scales = out.as<float>();
  CHECK_THROWS_AS(gpu::quantize(job, nullptr), std::invalid_argument);  // fp8 needs mxfp4
  axis.out.fp8_codes = nullptr;
  axis.out.fp8_scales = nullptr;
  CHECK_THROWS_AS(gpu::quantize(job, nullptr), std::invalid_argument);  // nvfp4 needs the workspace
  axis.spec = {QuantFormat::kMXFP4};
  axis.spec.blocks = BlockShape::k2D;  // 64 x 96: both multiples of the 32 x 32 tile
  CHECK_NOTHROW(gpu::quantize(job, nullptr));
  // 48 x 64 along rows: fine for 1-D blocks (rows of 64), not for 32 x 32 tiles (48 rows).
  job.rows = 48;
  job.cols = 64;
  job.down_cols = nullptr;
  job.along_rows = &axis;
  CHECK_THROWS_AS(gpu::quantize(job, nullptr), std::invalid_argument);
  axis.spec.blocks = BlockShape::k1D;
  CHECK_NOTHROW(gpu::quantize(job, nullptr));
  job.along_rows = nullptr;
  CHECK_THROWS_AS(gpu::quantize(job, nullptr), std::invalid_argument);  // no axis
  gpu::check(gpu::gpuDeviceSynchronize(), "sync");
}
