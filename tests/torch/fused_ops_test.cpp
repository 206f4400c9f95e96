// The fused common-path ops on CPU tensors (their references): the forward ones equal the model's
// former unfused expressions bit for bit; the backward ones equal autograd through those
// expressions within the stated tolerances; bad arguments are refused with one sentence.
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <stdexcept>
#include <string>

#include "catch.h"
#include "mxablate/kernels/torch/fused_ops.h"
#include "residual_checks.h"
#include "test_tensors.h"
#include "unfused_ops.h"

using namespace mxablate::kernels;
using namespace mxablate::test;

namespace {

at::Tensor randn(at::IntArrayRef shape, uint64_t seed, double scale = 1.0) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  return at::randn(shape, gen, at::TensorOptions().dtype(at::kFloat)) * scale;
}

std::pair<at::Tensor, at::Tensor> rope_tables(int64_t t, int64_t d) {
  const at::Tensor inv = at::pow(10000.0, -at::arange(0, d / 2, at::kDouble) * 2.0 / static_cast<double>(d));
  const at::Tensor angles = at::outer(at::arange(0, t, at::kDouble), inv);
  return {angles.cos().to(at::kFloat), angles.sin().to(at::kFloat)};
}

template <typename F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no exception)";
}

}  // namespace

TEST_CASE("rms_norm_forward on CPU is the unfused formula bit for bit", "[fused][cpu]") {
  const at::Tensor x = randn({3, 5, 96}, 1);
  const at::Tensor w = randn({96}, 2, 0.1) + 1.0;
  const RmsNormOutput out = rms_norm_forward(x, w, 1e-5, at::kFloat);
  CHECK(same_bits(out.y, unfused_rms_norm(x, w, 1e-5)));
  CHECK(out.rstd.sizes() == at::IntArrayRef({3, 5}));
  // bf16 output: the float32 result rounded once.
  CHECK(same_bits(rms_norm_forward(x, w, 1e-5, at::kBFloat16).y, unfused_rms_norm(x, w, 1e-5).to(at::kBFloat16)));
  // bf16 input: the same computation on its exact float32 values.
  const at::Tensor xb = x.to(at::kBFloat16);
  CHECK(same_bits(rms_norm_forward(xb, w, 1e-5, at::kFloat).y, unfused_rms_norm(xb.to(at::kFloat), w, 1e-5)));
}

TEST_CASE("rms_norm_backward on CPU equals autograd of the unfused formula", "[fused][cpu]") {
  for (at::ScalarType dy_type : {at::kFloat, at::kBFloat16}) {
    const at::Tensor x = randn({7, 130}, 3).requires_grad_(true);
    const at::Tensor w = (randn({130}, 4, 0.1) + 1.0).requires_grad_(true);
    const at::Tensor dy = randn({7, 130}, 5).to(dy_type);
    unfused_rms_norm(x, w, 1e-6).backward(dy.to(at::kFloat));
    const RmsNormOutput fwd = rms_norm_forward(x.detach(), w.detach(), 1e-6, at::kFloat);
    const RmsNormGrads g = rms_norm_backward(dy, x.detach(), w.detach(), fwd.rstd);
    // Same mathematics, different association (autograd runs the chain rule op by op): a few
    // float32 roundings apart.
    CHECK(rel_error(g.dx, x.grad()) < 1e-6);
    CHECK(rel_error(g.dweight, w.grad()) < 1e-6);
    CHECK(g.dx.scalar_type() == at::kFloat);
  }
}

TEST_CASE("the residual stream's fused ops on CPU are the unfused composition bit for bit", "[fused][cpu]") {
  const at::Tensor x = randn({3, 5, 96}, 21);
  const at::Tensor w = randn({96}, 22, 0.1) + 1.0;
  const at::Tensor dy = randn({3, 5, 96}, 24).to(at::kBFloat16);
  const at::Tensor dres = randn({3, 5, 96}, 25, 0.01);
  for (at::ScalarType branch_type : {at::kFloat, at::kBFloat16}) {
    INFO("branch " << c10::toString(branch_type));
    const at::Tensor b = randn({3, 5, 96}, 23).to(branch_type);
    check_add_rms_norm_composes(x, b, w);
    check_residual_backward_composes(x + b, w, dy, dres, dres, branch_type);
  }
}

TEST_CASE("to_float32 on CPU is ATen's widening bit for bit", "[fused][cpu]") { check_to_float32_widens(at::kCPU); }

TEST_CASE("swiglu on CPU: forward is silu(g) * u bit for bit, backward equals autograd", "[fused][cpu]") {
  const at::Tensor g = randn({4, 33}, 6, 3.0).requires_grad_(true);
  const at::Tensor u = randn({4, 33}, 7).requires_grad_(true);
  const at::Tensor h = swiglu_forward(g.detach(), u.detach(), at::kFloat);
  CHECK(same_bits(h, at::silu(g.detach()) * u.detach()));
  CHECK(same_bits(swiglu_forward(g.detach(), u.detach(), at::kBFloat16), (at::silu(g.detach()) * u.detach()).to(at::kBFloat16)));
  const at::Tensor dh = randn({4, 33}, 8);
  (at::silu(g) * u).backward(dh);
  const SwiGluGrads grads = swiglu_backward(dh, g.detach(), u.detach());
  CHECK(same_bits(grads.du, u.grad()));  // dh * silu(g): the same two operations
  // at::sigmoid and silu_backward's own sigmoid may round differently: a few ulps.
  CHECK(rel_error(grads.dg, g.grad()) < 1e-6);
  // bf16 operands: gradients come back in their dtype, rounded from the float32 computation.
  const SwiGluGrads gb = swiglu_backward(dh, g.detach().to(at::kBFloat16), u.detach().to(at::kBFloat16));
  CHECK(gb.dg.scalar_type() == at::kBFloat16);
  CHECK(gb.du.scalar_type() == at::kBFloat16);
}

TEST_CASE("rope on CPU: forward is the unfused formula, the inverse is autograd's gradient", "[fused][cpu]") {
  const int64_t b = 2, t = 5, h = 3, d = 8;
  const auto tables = rope_tables(t, d);
  const at::Tensor &cos = tables.first, &sin = tables.second;
  // The model's layout: a (B, T, H, D) projection viewed as (B, H, T, D).
  const at::Tensor base = randn({b, t, h, d}, 9).requires_grad_(true);
  const at::Tensor x = base.transpose(1, 2);
  const at::Tensor y = rope(x.detach(), cos, sin, RopeDirection::kForward, at::kFloat);
  CHECK(y.is_contiguous());
  CHECK(same_bits(y, unfused_rope(x.detach(), cos, sin)));
  CHECK(same_bits(rope(x.detach(), cos, sin, RopeDirection::kForward, at::kBFloat16),
                  unfused_rope(x.detach(), cos, sin).to(at::kBFloat16)));

  const at::Tensor dy = randn({b, h, t, d}, 10);
  unfused_rope(x, cos, sin).backward(dy);
  // Written into x's own layout, as the autograd function does.
  const at::Tensor dx = at::empty_strided(x.sizes(), x.strides(), x.options());
  rope_into(dy, cos, sin, RopeDirection::kInverse, dx);
  // dy1 cos + dy2 sin and dy2 cos - dy1 sin: autograd's sums of the same products (addition
  // commutes), so equal values (the sign of a zero may differ: compare numerically).
  CHECK(at::equal(dx, base.grad().transpose(1, 2)));
  CHECK(dx.strides() == x.strides());
}

TEST_CASE("cross_entropy on CPU equals at::cross_entropy_loss and its gradient", "[fused][cpu]") {
  const int64_t rows = 9, vocab = 1001;
  const at::Tensor logits = randn({rows, vocab}, 11, 4.0).requires_grad_(true);
  at::Generator gen = at::detail::createCPUGenerator(12);
  const at::Tensor targets = at::randint(vocab, {rows}, gen, at::TensorOptions().dtype(at::kLong));
  const at::Tensor want = at::cross_entropy_loss(logits, targets);
  want.backward();
  const CrossEntropyOutput out = cross_entropy_forward(logits.detach(), targets);
  // logsumexp - x[t] against log_softmax's x - max - log(sum): the same value rounded differently.
  CHECK(out.loss.mean().item<double>() == Approx(want.item<double>()).epsilon(1e-6));
  CHECK(rel_error(out.loss, -at::log_softmax(logits.detach(), 1).gather(1, targets.unsqueeze(1)).squeeze(1)) < 1e-6);
  const at::Tensor dl = cross_entropy_backward(at::ones({}), logits.detach(), targets, out.lse);
  CHECK(rel_error(dl, logits.grad()) < 1e-6);
  // An upstream gradient scales it; bf16 logits give bf16 gradients.
  CHECK(rel_error(cross_entropy_backward(at::full({}, 3.0), logits.detach(), targets, out.lse), logits.grad() * 3) < 1e-6);
  const at::Tensor lb = logits.detach().to(at::kBFloat16);
  const CrossEntropyOutput ob = cross_entropy_forward(lb, targets);
  CHECK(cross_entropy_backward(at::ones({}), lb, targets, ob.lse).scalar_type() == at::kBFloat16);
}

TEST_CASE("the fused ops refuse bad arguments with one sentence", "[fused][cpu]") {
  const at::Tensor x = randn({4, 8}, 13);
  const at::Tensor w = at::ones({8});
  CHECK(message_of([&] { rms_norm_forward(x.to(at::kDouble), w, 1e-5, at::kFloat); }) ==
        "rms_norm_forward input must be float32 or bfloat16, got Double");
  CHECK(message_of([&] { rms_norm_forward(x, at::ones({7}), 1e-5, at::kFloat); }) ==
        "rms_norm_forward: weight has shape (7), expected (8)");
  CHECK(message_of([&] { rms_norm_forward(x, w, 1e-5, at::kHalf); }) ==
        "rms_norm_forward: the output dtype must be float32 or bfloat16, got Half");
  CHECK(message_of([&] { add_rms_norm_forward(x.to(at::kBFloat16), x, w, 1e-5, at::kFloat); }) ==
        "add_rms_norm_forward: the input must be a float32 tensor");
  CHECK(message_of([&] { add_rms_norm_forward(x, randn({4, 7}, 14), w, 1e-5, at::kFloat); }) ==
        "add_rms_norm_forward: branch has shape (4, 7), expected (4, 8)");
  CHECK(message_of([&] { residual_add(x, x.to(at::kDouble)); }) ==
        "residual_add branch must be float32 or bfloat16, got Double");
  CHECK(message_of([&] { residual_add(randn({0, 8}, 14), randn({0, 8}, 14)); }) == "residual_add input is empty");
  {
    const RmsNormOutput f = rms_norm_forward(x, w, 1e-5, at::kFloat);
    CHECK(message_of([&] { residual_rms_norm_backward(x, x, w, f.rstd, randn({4, 8}, 14).to(at::kBFloat16), {}); }) ==
          "residual_rms_norm_backward: dres must be a float32 tensor");
    CHECK(message_of([&] { residual_rms_norm_backward(x, x, w, f.rstd, randn({8, 4}, 14), {}); }) ==
          "residual_rms_norm_backward: dres has shape (8, 4), expected (4, 8)");
    CHECK(message_of([&] { residual_rms_norm_backward(x, x, w, f.rstd, at::Tensor(), at::kHalf); }) ==
          "residual_rms_norm_backward: the output dtype must be float32 or bfloat16, got Half");
  }
  CHECK(message_of([&] { swiglu_forward(x, randn({4, 9}, 14), at::kFloat); }) ==
        "swiglu_forward: up has shape (4, 9), expected (4, 8)");
  CHECK(message_of([&] { swiglu_forward(x, x.to(at::kBFloat16), at::kFloat); }) ==
        "swiglu_forward: gate and up must have one dtype, got Float and BFloat16");
  const auto tables = rope_tables(5, 8);
  const at::Tensor &cos = tables.first, &sin = tables.second;
  CHECK(message_of([&] { rope(randn({1, 2, 4, 8}, 15), cos, sin, RopeDirection::kForward, at::kFloat); }) ==
        "rope: cos has shape (5, 4), expected (4, 4)");
  CHECK(message_of([&] { rope(randn({1, 2, 5, 7}, 15), cos, sin, RopeDirection::kForward, at::kFloat); }) ==
        "rope: head_dim must be even, got 7");
  const at::Tensor logits = randn({3, 10}, 16);
  CHECK(message_of([&] { cross_entropy_forward(logits, at::tensor({1, 10, 2}, at::kLong)); }) ==
        "cross_entropy: target 10 is outside the vocabulary [0, 10)");
  CHECK(message_of([&] { cross_entropy_forward(logits, at::tensor({1, -1, 2}, at::kLong)); }) ==
        "cross_entropy: target -1 is outside the vocabulary [0, 10)");
  CHECK(message_of([&] { cross_entropy_forward(logits, at::tensor({1, 2, 3}, at::kInt)); }) ==
        "cross_entropy_forward: the targets must be an int64 tensor");
  CHECK(message_of([&] { cross_entropy_forward(logits, at::tensor({1, 2}, at::kLong)); }) ==
        "cross_entropy_forward: the targets have shape (2), expected (3)");
}
