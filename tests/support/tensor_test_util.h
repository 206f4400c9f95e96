// Small LibTorch helpers shared by the tests of kernels/torch and of the trainer's layers: one
// definition each, so that every test draws its inputs and measures its errors the same way.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

namespace mxablate::test {

// rows x cols float32 values spanning several binades per block (a Gaussian times the exp of
// another), so that block scales, and the axis they run along, matter.
inline at::Tensor spread(int64_t rows, int64_t cols, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  return at::randn({rows, cols}, gen) * at::exp(at::randn({rows, cols}, gen));
}

// t rounded to BF16 and widened back to float32: what a plain BF16 operand holds.
inline at::Tensor bf16(const at::Tensor& t) { return t.to(at::kBFloat16).to(at::kFloat); }

// ‖a − b‖ / ‖b‖, computed in a's and b's dtype.
inline double rel_err(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).norm().item<double>() / b.norm().item<double>();
}

// The message of the E that f throws, or "no error" (an exception of another type propagates, so
// a test that expects E fails on it).
template <class E = std::invalid_argument>
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace mxablate::test
