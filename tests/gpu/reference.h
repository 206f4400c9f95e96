// The CPU reference's outputs for one axis, everything requested, plus the FP8 re-expression
// of its packed MXFP4 output: what the GPU kernels and their host model must reproduce.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "mxablate/kernels/gpu/mx_to_fp8.h"
#include "mxablate/kernels/quantize.h"
#include "quant_test_util.h"

namespace mxablate::test {

// Everything one quantize call can output, plus the FP8 re-expression of packed MXFP4.
struct Expected : Quantized {
  std::vector<uint8_t> fp8_codes;
  std::vector<float> fp8_scales;
  int64_t fp8_inexact_chunks = 0;
};

inline Expected reference_quantize(const float* x, int64_t rows, int64_t cols, kernels::Axis axis,
                                   const kernels::QuantSpec& spec, const kernels::RngKey& key,
                                   bool want_fp8) {
  using namespace kernels;
  Expected e;
  static_cast<Quantized&>(e) = run_quantize(x, rows, cols, axis, spec, key);
  if (want_fp8) {
    const int64_t lines = axis == Axis::kRows ? rows : cols, length = axis == Axis::kRows ? cols : rows;
    e.fp8_codes.assign(static_cast<size_t>(rows * cols), 0);
    e.fp8_scales.assign(static_cast<size_t>(lines * (length / kFp8ChunkSize)), 0.0f);
    e.fp8_inexact_chunks = mx_to_fp8_reference(e.packed.data(), e.scales.data(), lines, length,
                                               e.fp8_codes.data(), e.fp8_scales.data());
  }
  return e;
}

// Index of the first differing element (bitwise, so NaN payloads count), or -1.
template <typename T>
int64_t first_difference(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) return static_cast<int64_t>(i);
  return -1;
}

// Counters equal; sums equal up to summation order: within 1e-9 of the sum of the terms'
// magnitudes (bounded, for the signed error sum, by sqrt(elements * sum of squares)), since
// huge errors of both signs can cancel and leave a result smaller than the rounding of the terms.
inline bool telemetry_matches(const kernels::QuantTelemetry& got, const kernels::QuantTelemetry& want,
                              std::string* why) {
  auto close = [](double a, double b, double magnitude) {
    return std::fabs(a - b) <= 1e-9 * std::max({1.0, std::fabs(b), magnitude});
  };
  const double error_magnitude = std::sqrt(static_cast<double>(want.elements) * want.sum_sq_error);
  std::ostringstream s;
  if (got.elements != want.elements) s << "elements " << got.elements << " vs " << want.elements << "; ";
  if (got.nonzero_inputs != want.nonzero_inputs) s << "nonzero " << got.nonzero_inputs << " vs " << want.nonzero_inputs << "; ";
  if (got.saturated != want.saturated) s << "saturated " << got.saturated << " vs " << want.saturated << "; ";
  if (got.flushed != want.flushed) s << "flushed " << got.flushed << " vs " << want.flushed << "; ";
  if (got.nonfinite_blocks != want.nonfinite_blocks) s << "nonfinite_blocks " << got.nonfinite_blocks << " vs " << want.nonfinite_blocks << "; ";
  if (got.dequant_clamped != want.dequant_clamped) s << "clamped " << got.dequant_clamped << " vs " << want.dequant_clamped << "; ";
  if (!close(got.sum_sq_error, want.sum_sq_error, 0.0)) s << "sum_sq_error " << got.sum_sq_error << " vs " << want.sum_sq_error << "; ";
  if (!close(got.sum_sq_input, want.sum_sq_input, 0.0)) s << "sum_sq_input " << got.sum_sq_input << " vs " << want.sum_sq_input << "; ";
  if (!close(got.sum_error, want.sum_error, error_magnitude)) s << "sum_error " << got.sum_error << " vs " << want.sum_error << "; ";
  if (why) *why = s.str();
  return s.str().empty();
}

inline std::string describe(const kernels::QuantSpec& spec, kernels::Axis axis, int64_t rows, int64_t cols) {
  std::ostringstream s;
  s << to_string(spec.format) << " rule=" << to_string(spec.scale_rule) << " rounding=" << to_string(spec.rounding)
    << " hadamard=" << to_string(spec.hadamard) << "/" << spec.hadamard_size
    << " sr_prescale=" << spec.sr_prescale << " axis=" << to_string(axis)
    << " shape=" << rows << "x" << cols;
  if (spec.blocks != kernels::BlockShape::k1D) s << " blocks=" << to_string(spec.blocks);
  return s.str();
}

}  // namespace mxablate::test
