// Small helpers shared by the kernel tests.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "mxablate/kernels/quantize.h"

namespace mxablate::test {

// Fake-quantized values plus the packed representation of one quantize() call.
struct Quantized {
  std::vector<float> dequant;
  std::vector<uint16_t> dequant_bf16;
  std::vector<uint8_t> packed;
  std::vector<uint8_t> scales;
  float tensor_scale = 0;
  kernels::QuantTelemetry telemetry;
};

inline Quantized run_quantize(const float* x, int64_t rows, int64_t cols, kernels::Axis axis,
                              const kernels::QuantSpec& spec, const kernels::RngKey& key = {},
                              const kernels::Fp8DelayedScale& delayed = {}) {
  using namespace kernels;
  Quantized q;
  const size_t n = static_cast<size_t>(rows * cols);
  q.dequant.assign(n, -12345.0f);  // poison: every element must be written
  q.dequant_bf16.assign(n, 0xDEAD);
  q.packed.assign(packed_bytes(spec.format, rows, cols), 0xAB);
  q.scales.assign(scale_bytes(spec.format, rows, cols), 0xCD);
  QuantOutputs out;
  out.dequant = q.dequant.data();
  out.dequant_bf16 = q.dequant_bf16.data();
  if (!q.packed.empty()) out.packed = q.packed.data();
  if (!q.scales.empty()) out.scales = q.scales.data();
  if (element_format(spec.format)) out.tensor_scale = &q.tensor_scale;
  q.telemetry = quantize(x, rows, cols, axis, spec, key, out, delayed);
  return q;
}

inline Quantized run_quantize(const std::vector<float>& x, int64_t rows, int64_t cols,
                              kernels::Axis axis, const kernels::QuantSpec& spec,
                              const kernels::RngKey& key = {}, const kernels::Fp8DelayedScale& delayed = {}) {
  return run_quantize(x.data(), rows, cols, axis, spec, key, delayed);
}

// Gaussian values with a few large outlier columns: what LLM activations look like.
inline std::vector<float> activation_like(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      x[static_cast<size_t>(r * cols + c)] = normal(gen) * (c % 37 == 3 ? 30.0f : 1.0f);
  return x;
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace mxablate::test
