// The trainer's dtype convention on CUDA (docs/design.md §4): a linear's output is the GEMM's BF16
// result, dY is taken as it comes, dX comes back in x's dtype and dW in the float32 weight's.
#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/cuda.h>

#include "catch.h"
#include "mxablate/trainer/numerics/mx_linear.h"

using namespace mxablate::trainer;

TEST_CASE("MXLinear on CUDA returns BF16 and gives gradients in their inputs' dtypes",
          "[trainer][mx_linear][cuda]") {
  if (!torch::cuda::is_available()) MXABLATE_SKIP("no CUDA device: the BF16 GEMM path cannot run here");
  const at::Device cuda(at::kCUDA, 0);
  at::Generator gen = at::detail::createCPUGenerator(3);
  const at::Tensor x0 = at::randn({64, 96}, gen), w0 = at::randn({32, 96}, gen);
  const at::Tensor g0 = at::randn({64, 32}, gen);
  auto state = std::make_shared<const LinearState>(
      LinearState{0, plain_bf16_plan(), std::make_shared<QuantSession>()});
  for (const at::ScalarType x_dtype : {at::kFloat, at::kBFloat16}) {
    at::Tensor x = x0.to(cuda).to(x_dtype).requires_grad_(true);
    at::Tensor w = w0.to(cuda).requires_grad_(true);
    const at::Tensor y = mx_linear(x, w, state);
    CHECK(y.scalar_type() == at::kBFloat16);
    const at::Tensor xb = x0.to(cuda).to(at::kBFloat16), wb = w0.to(cuda).to(at::kBFloat16);
    CHECK(at::equal(y, at::mm(xb, wb.t())));
    const at::Tensor g = g0.to(cuda).to(at::kBFloat16);
    y.backward(g);
    CHECK(x.grad().scalar_type() == x_dtype);
    CHECK(w.grad().scalar_type() == at::kFloat);
    CHECK(at::equal(x.grad(), at::mm(g, wb).to(x_dtype)));
    CHECK(at::equal(w.grad(), at::mm(g.t(), xb).to(at::kFloat)));
  }
}
