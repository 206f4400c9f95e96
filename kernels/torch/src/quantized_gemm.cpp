// quantized_gemm: one GEMM through the engine of the route it is given (gemm_engine.h).
#include "mxablate/kernels/torch/quantized_gemm.h"

#include <ATen/ATen.h>

#include <stdexcept>

#include "tensor_checks.h"

namespace mxablate::kernels {
namespace {

// The operand as the GEMM sees it: (M or N) x K.
int64_t outer_dim(const GemmOperand& op) { return op.tensor.size(op.axis == Axis::kRows ? 0 : 1); }
int64_t reduction_dim(const GemmOperand& op) {
  return op.tensor.size(op.axis == Axis::kRows ? 1 : 0);
}

void check_operands(const GemmOperand& a, const GemmOperand& b) {
  detail::check_quantizable(a.tensor, a.axis, a.spec, "quantized_gemm operand a");
  detail::check_quantizable(b.tensor, b.axis, b.spec, "quantized_gemm operand b");
  if (a.tensor.device() != b.tensor.device())
    throw std::invalid_argument("quantized_gemm operands are on different devices (" +
                                a.tensor.device().str() + ", " + b.tensor.device().str() + ")");
  if (reduction_dim(a) != reduction_dim(b))
    throw std::invalid_argument("quantized_gemm operands disagree on K: a has " +
                                std::to_string(reduction_dim(a)) + ", b has " +
                                std::to_string(reduction_dim(b)));
}

}  // namespace

at::Tensor quantized_gemm(const GemmOperand& a, const GemmOperand& b, GemmPath path,
                          GemmReport* report) {
  check_operands(a, b);
  if (report) *report = GemmReport{};
  const std::string unavailable = gemm_route_unavailable_reason(path, a.tensor.device());
  if (!unavailable.empty()) throw std::invalid_argument(unavailable);
  const GemmEngine& engine = gemm_engine(path);
  for (const std::string& problem : {engine.operand_problem(a.spec, b.spec),
                                     engine.shape_problem(outer_dim(a), outer_dim(b), reduction_dim(a))})
    if (!problem.empty()) throw std::invalid_argument(problem);
  // Dequantized values (the emulated route) keep each operand's dtype, as fake_quantize writes them.
  const QuantizedOperand qa = engine.quantize_operand(a, report ? &report->a : nullptr, a.tensor.scalar_type());
  const QuantizedOperand qb = engine.quantize_operand(b, report ? &report->b : nullptr, b.tensor.scalar_type());
  if (report) {
    report->fp8_chunks = qa.chunks + qb.chunks;
    report->fp8_inexact_chunks = qa.inexact_chunks + qb.inexact_chunks;
  }
  return engine.multiply(qa, qb, path == GemmPath::kHopperFP8 ? at::kBFloat16 : a.tensor.scalar_type());
}

}  // namespace mxablate::kernels
