// adamw_step and clip_grad_norm (docs/design.md §4): on the CPU they are LibTorch's own AdamW and
// clip_grad_norm_ (the reference, bit for bit); on CUDA with torch >= 2.1 ATen's fused
// multi-tensor kernels, which must follow the reference within float32 rounding over several
// steps, two parameter groups and a learning rate that changes every step. Either way the state
// lives in AdamW's param state, so saving it and resuming gives the same bits as continuing.
#include <ATen/ATen.h>
#include <torch/cuda.h>
#include <torch/serialize.h>
#include <torch/types.h>  // clip_grad.h uses torch::Tensor without including it (1.13)
#include <torch/nn/utils/clip_grad.h>

#include <limits>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "catch.h"
#include "mxablate/trainer/model/optimizer.h"

using namespace mxablate::trainer;
using torch::optim::AdamW;
using torch::optim::AdamWOptions;
using torch::optim::AdamWParamState;

namespace {

// Matrices (decayed) and vectors (not), odd sizes included: the kernel's chunking must not matter.
const std::vector<std::vector<int64_t>> kShapes = {{48, 32}, {7, 5, 3}, {300}, {1}, {33, 65}};

std::vector<at::Tensor> make_params(at::Device device, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  std::vector<at::Tensor> out;
  for (const auto& shape : kShapes)
    out.push_back(at::randn(shape, gen).to(device).requires_grad_(true));
  return out;
}

std::vector<at::Tensor> copies(const std::vector<at::Tensor>& params) {
  std::vector<at::Tensor> out;
  for (const at::Tensor& p : params) out.push_back(p.detach().clone().requires_grad_(true));
  return out;
}

// make_adamw's two groups (decay 0.1 on matrices, none on vectors) over `params`.
std::unique_ptr<AdamW> make_optimizer(const std::vector<at::Tensor>& params) {
  std::vector<at::Tensor> decayed, plain;
  for (const at::Tensor& p : params) (p.dim() >= 2 ? decayed : plain).push_back(p);
  const auto options = [](double wd) {
    return std::make_unique<AdamWOptions>(AdamWOptions(1e-2).betas({0.9, 0.95}).eps(1e-5).weight_decay(wd));
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decayed, options(0.1));
  groups.emplace_back(plain, options(0.0));
  return std::make_unique<AdamW>(std::move(groups), AdamWOptions(1e-2));
}

// The same gradients for every optimizer at step `step` (scaled so that some are large).
void set_grads(const std::vector<at::Tensor>& params, int step) {
  at::Generator gen = at::detail::createCPUGenerator(1000 + static_cast<uint64_t>(step));
  for (const at::Tensor& p : params) {
    at::Tensor g = at::randn(p.sizes(), gen) * (1.0 + step);
    const_cast<at::Tensor&>(p).mutable_grad() = g.to(p.device());
  }
}

double lr_at(int step) { return 1e-2 * (1.0 + 0.5 * step) / (1.0 + step * step); }

enum class Path { kReference, kAdamwStep };

void take_steps(AdamW& opt, const std::vector<at::Tensor>& params, int from, int to, Path path) {
  for (int step = from; step < to; ++step) {
    set_grads(params, step);
    set_learning_rate(opt, lr_at(step));
    if (path == Path::kReference) opt.step();
    else adamw_step(opt);
  }
}

// Whether `key` is the optimizer's state key of `p`: the TensorImpl's address as text in
// LibTorch 1.13, the address itself in 2.x.
template <typename Key>
bool is_key_of(const Key& key, const at::Tensor& p) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream os;
    os << p.unsafeGetTensorImpl();
    return key == os.str();
  } else {
    return static_cast<const void*>(key) == static_cast<const void*>(p.unsafeGetTensorImpl());
  }
}

// The AdamW state of the index-th parameter (groups in order).
const AdamWParamState& state_of(AdamW& opt, size_t index) {
  std::vector<at::Tensor> params;
  for (auto& group : opt.param_groups())
    for (auto& p : group.params()) params.push_back(p);
  REQUIRE(index < params.size());
  for (auto& [key, value] : opt.state())
    if (is_key_of(key, params[index])) return static_cast<const AdamWParamState&>(*value);
  FAIL("no AdamW state for parameter " << index);
  throw std::logic_error("unreachable");
}

void require_same_bits(AdamW& a, const std::vector<at::Tensor>& pa, AdamW& b,
                       const std::vector<at::Tensor>& pb) {
  for (size_t i = 0; i < pa.size(); ++i) {
    INFO("parameter " << i);
    CHECK(at::equal(pa[i], pb[i]));
    CHECK(at::equal(state_of(a, i).exp_avg(), state_of(b, i).exp_avg()));
    CHECK(at::equal(state_of(a, i).exp_avg_sq(), state_of(b, i).exp_avg_sq()));
    CHECK(state_of(a, i).step() == state_of(b, i).step());
  }
}

// Steps 3 times, saves the optimizer, restores it into fresh copies, and steps both 3 more times.
void check_resume(at::Device device) {
  std::vector<at::Tensor> continuing = make_params(device, 5);
  auto opt = make_optimizer(continuing);
  take_steps(*opt, continuing, 0, 3, Path::kAdamwStep);

  torch::serialize::OutputArchive out;
  opt->save(out);
  std::stringstream bytes;
  out.save_to(bytes);
  std::vector<at::Tensor> resumed = copies(continuing);
  auto restored = make_optimizer(resumed);
  torch::serialize::InputArchive in;
  in.load_from(bytes, device);
  restored->load(in);

  take_steps(*opt, continuing, 3, 6, Path::kAdamwStep);
  take_steps(*restored, resumed, 3, 6, Path::kAdamwStep);
  require_same_bits(*opt, continuing, *restored, resumed);
  CHECK(state_of(*restored, 0).step() == 6);
}

}  // namespace

TEST_CASE("On the CPU adamw_step and clip_grad_norm are LibTorch's own, bit for bit",
          "[trainer][optimizer]") {
  std::vector<at::Tensor> a = make_params(at::kCPU, 1), b = copies(a);
  auto oa = make_optimizer(a), ob = make_optimizer(b);
  CHECK_FALSE(fused_adamw_applies(*oa));
  for (int step = 0; step < 4; ++step) {
    set_grads(a, step);
    set_grads(b, step);
    const double na = clip_grad_norm(a, 5.0).item<double>();
    const double nb = torch::nn::utils::clip_grad_norm_(b, 5.0);
    CHECK(na == nb);
    set_learning_rate(*oa, lr_at(step));
    set_learning_rate(*ob, lr_at(step));
    adamw_step(*oa);
    ob->step();
  }
  require_same_bits(*oa, a, *ob, b);
}

TEST_CASE("adamw_step resumed from saved state gives the same bits as continuing (CPU)",
          "[trainer][optimizer]") {
  check_resume(at::kCPU);
}

TEST_CASE("The fused AdamW step follows torch::optim::AdamW on CUDA", "[trainer][optimizer][cuda]") {
  if (!torch::cuda::is_available()) MXABLATE_SKIP("no CUDA device: the fused AdamW path runs only there");
  const at::Device cuda(at::kCUDA, 0);
  std::vector<at::Tensor> fused = make_params(cuda, 2), reference = copies(fused);
  auto of = make_optimizer(fused), oref = make_optimizer(reference);
  set_grads(fused, 0);
  if (!fused_adamw_applies(*of)) MXABLATE_SKIP("this LibTorch has no fused AdamW (needs >= 2.1)");
  constexpr int kSteps = 8;
  take_steps(*of, fused, 0, kSteps, Path::kAdamwStep);
  take_steps(*oref, reference, 0, kSteps, Path::kReference);
  for (size_t i = 0; i < fused.size(); ++i) {
    INFO("parameter " << i << " " << fused[i].sizes());
    // Float32 arithmetic in another order (bias corrections in the kernel's precision): the
    // parameters, of order 1, agree to a few ulps of the updates after every step.
    CHECK(at::allclose(fused[i], reference[i], 1e-5, 1e-6));
    CHECK(at::allclose(state_of(*of, i).exp_avg(), state_of(*oref, i).exp_avg(), 1e-5, 1e-6));
    CHECK(at::allclose(state_of(*of, i).exp_avg_sq(), state_of(*oref, i).exp_avg_sq(), 1e-5, 1e-6));
    CHECK(state_of(*of, i).step() == kSteps);
    // The updates really happened (not both left unchanged).
    CHECK_FALSE(at::equal(fused[i], make_params(cuda, 2)[i]));
  }
}

TEST_CASE("The fused AdamW step resumes bit for bit on CUDA", "[trainer][optimizer][cuda]") {
  if (!torch::cuda::is_available()) MXABLATE_SKIP("no CUDA device: the fused AdamW path runs only there");
  check_resume(at::Device(at::kCUDA, 0));
}

TEST_CASE("clip_grad_norm on CUDA follows LibTorch's clip_grad_norm_", "[trainer][optimizer][cuda]") {
  if (!torch::cuda::is_available()) MXABLATE_SKIP("no CUDA device: the multi-tensor norm runs only there");
  const at::Device cuda(at::kCUDA, 0);
  for (const double max_norm : {1.0, 1e9, std::numeric_limits<double>::infinity()}) {
    INFO("max_norm " << max_norm);
    std::vector<at::Tensor> a = make_params(cuda, 3), b = copies(a);
    set_grads(a, 2);
    set_grads(b, 2);
    const double na = clip_grad_norm(a, max_norm).item<double>();
    const double nb = torch::nn::utils::clip_grad_norm_(b, max_norm);
    CHECK(na == Approx(nb).epsilon(1e-6));
    for (size_t i = 0; i < a.size(); ++i) CHECK(at::allclose(a[i].grad(), b[i].grad(), 1e-5, 1e-7));
    if (max_norm > 1e8) {  // nothing to clip: the gradients are untouched
      std::vector<at::Tensor> c = make_params(cuda, 3);
      set_grads(c, 2);
      for (size_t i = 0; i < a.size(); ++i) CHECK(at::equal(a[i].grad(), c[i].grad()));
    }
  }
}
