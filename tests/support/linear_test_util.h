// Helpers shared by the tests of MXLinear (docs/design.md §4, "MXLinear") and of its GEMMs on the
// engine seam (§3, "GEMM paths"): one layer's forward and backward on given tensors, the sessions
// that key its random streams and pick its engines, and the key each operand is quantized with.
#pragma once

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "mxablate/kernels/philox.h"
#include "mxablate/trainer/numerics/mx_linear.h"
#include "tensor_test_util.h"

namespace mxablate::test {

// Tokens, in features, out features: all different, so that an operand quantized along the wrong
// axis (or transposed) cannot pass.
inline constexpr int64_t kM = 96, kK = 64, kN = 160;

// The layer, seed and step a test layer's random streams are keyed with unless a test says
// otherwise (its key: seed, step, layer, GEMM, operand; docs/design.md §3).
inline constexpr int kLayer = 3;
inline constexpr uint64_t kSeed = 77;
inline constexpr uint32_t kStep = 5;

// One forward and backward: Y, dX, dW; `records` only from run_traced.
struct Result {
  at::Tensor y, dx, dw;
  std::vector<trainer::QuantSession::Record> records;
};

inline std::shared_ptr<trainer::QuantSession> session_at(uint32_t step = kStep, uint64_t seed = kSeed) {
  auto session = std::make_shared<trainer::QuantSession>();
  session->seed = seed;
  session->step = step;
  return session;
}

// Sends the GEMMs of precision p to route r; a state made afterwards picks its engines from it.
inline void set_route(trainer::QuantSession& session, contract::GemmPrecision p, kernels::GemmRoute r) {
  session.routes.by_precision[static_cast<size_t>(p)].route = r;
}

inline std::shared_ptr<trainer::QuantSession> session_with(contract::GemmPrecision p, kernels::GemmRoute r,
                                                           uint32_t step = kStep, uint64_t seed = kSeed) {
  auto session = session_at(step, seed);
  set_route(*session, p, r);
  return session;
}

// mx_linear on copies of x0 and w0 that take gradients, then its backward from dY = g. The
// session's records are left to the caller.
inline Result run(const at::Tensor& x0, const at::Tensor& w0, const at::Tensor& g,
                  const std::shared_ptr<const trainer::LinearState>& state) {
  at::Tensor x = x0.clone().requires_grad_(true);
  at::Tensor w = w0.clone().requires_grad_(true);
  at::Tensor y = trainer::mx_linear(x, w, state);
  y.backward(g);
  return {y.detach(), x.grad(), w.grad(), {}};
}

// The same for layer kLayer under `plan`, keyed (seed, step).
inline Result run(const at::Tensor& x0, const at::Tensor& w0, const at::Tensor& g, const trainer::LinearPlan& plan,
                  uint32_t step = kStep, uint64_t seed = kSeed) {
  return run(x0, w0, g, std::make_shared<const trainer::LinearState>(kLayer, plan, session_at(step, seed)));
}

// run with telemetry collected: also each quantized operand's record.
inline Result run_traced(const at::Tensor& x0, const at::Tensor& w0, const at::Tensor& g,
                         const trainer::LinearPlan& plan) {
  auto session = session_at();
  session->collect_telemetry = true;
  Result r = run(x0, w0, g, std::make_shared<const trainer::LinearState>(kLayer, plan, session));
  r.records = session->take_records();
  return r;
}

// The key run quantizes operand o of GEMM g with.
inline kernels::RngKey key(kernels::GemmKind g, kernels::Operand o, uint32_t step = kStep, uint64_t seed = kSeed) {
  return {seed, step, static_cast<uint32_t>(kLayer), g, o};
}

}  // namespace mxablate::test
