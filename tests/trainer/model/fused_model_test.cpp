// The model with the fused common-path ops (fused_model_ops.h, docs/design.md §4) against the unfused
// model: on the CPU by default nothing changes (bit for bit); the fused ops' CPU references wired
// in (FusedOps::kAlways) and, on CUDA, the fused kernels give the unfused loss and gradients
// within tolerance; checkpointed blocks recompute them bit for bit; CUDA runs repeat exactly.
#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/cuda.h>

#include <string>
#include <vector>

#include "catch.h"
#include "mxablate/kernels/torch/fused_ops.h"
#include "mxablate/trainer/numerics/fused_model_ops.h"
#include "mxablate/trainer/plan/linear_plan.h"
#include "mxablate/trainer/model/model.h"

using namespace mxablate;
using namespace mxablate::trainer;
using contract::GemmPrecision;

namespace {

constexpr int64_t kVocab = 96;

contract::RunConfig mxfp4_config() {
  contract::RunConfig c;
  c.precision = {GemmPrecision::kMXFP4, GemmPrecision::kMXFP4, GemmPrecision::kMXFP4};
  c.quant.hadamard = {kernels::HadamardMode::kDeterministic, 16, {kernels::GemmKind::kWgrad}};
  return c;
}

// FDW+H16 with stochastic rounding of the gradients: dg and du keyed by their own layers.
contract::RunConfig mxfp4_sr_config() {
  contract::RunConfig c = mxfp4_config();
  c.quant.stochastic_rounding.add(contract::OperandClass::kGrad);
  c.quant.sr_prescale = 0.75;
  return c;
}

struct Pass {
  at::Tensor loss;
  std::vector<std::string> names;
  std::vector<at::Tensor> grads;  // on the CPU
  int64_t made_ahead = 0;         // operands layers took from a fused producer
};

// One forward and backward pass of the smoke model on `device`.
Pass forward_backward(FusedOps fused, const at::Device& device, bool checkpointing = false,
                      const contract::RunConfig& config = {}, bool producers = true) {
  ModelOptions o;
  o.shape = *find_model_preset("smoke");
  o.vocab_size = kVocab;
  o.init_seed = 5;
  o.layer_plans = plan_run_layers(config, linear_layers(o.shape, kVocab), o.shape.n_layers).phases[0];
  o.session = std::make_shared<QuantSession>();
  o.session->seed = 17;
  o.session->step = 3;
  o.session->fused_producers = producers;
  o.recomputed_blocks = checkpointing ? o.shape.n_layers : 0;
  o.fused_ops = fused;
  o.device = device;
  LlamaModel model(o);
  at::Generator gen = at::detail::createCPUGenerator(9);
  const at::Tensor tokens = at::randint(0, kVocab, {2, 32}, gen).to(device);
  const at::Tensor targets = at::randint(0, kVocab, {2, 32}, gen).to(device);
  Pass p;
  const at::Tensor loss = model->loss(tokens, targets);
  loss.backward();
  p.loss = loss.detach().cpu();
  for (const auto& item : model->named_parameters()) {
    p.names.push_back(item.key());
    p.grads.push_back(item.value().grad().cpu());
  }
  p.made_ahead = o.session->made_ahead.hits();
  return p;
}

double rel_error(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor g = got.to(at::kDouble), w = want.to(at::kDouble);
  return ((g - w).norm() / w.norm()).item<double>();
}

bool identical(const Pass& a, const Pass& b) {
  if (!at::equal(a.loss, b.loss) || a.names != b.names) return false;
  for (size_t i = 0; i < a.grads.size(); ++i)
    if (!at::equal(a.grads[i], b.grads[i])) return false;
  return true;
}

void check_identical(const Pass& a, const Pass& b) {
  CHECK(at::equal(a.loss, b.loss));
  REQUIRE(a.names == b.names);
  for (size_t i = 0; i < a.grads.size(); ++i) {
    INFO(a.names[i]);
    CHECK(at::equal(a.grads[i], b.grads[i]));
  }
}

// The fused and unfused models differ by float32 roundings: other association in the reductions
// (rstd, logsumexp, the backward formulas), and on CUDA RMSNorm's and SwiGLU's outputs rounded to
// BF16 by the fused op rather than by the next GEMM, with their gradients arriving (and summed
// over q/k/v, gate/up) in BF16. Tolerances, normwise per parameter gradient (a wiring mistake is
// off by order one):
//   - BF16 GEMMs. On the CPU the difference measured 8e-6 at most (bound 1e-4); on CUDA a
//     rounding difference can flip a BF16 rounding of an operand (2^-8 on that element) and the
//     gradient sums run in BF16: about 1e-3 expected (bound 1e-2).
//   - MXFP4 GEMMs. An element that lands on the other side of an FP4 rounding midpoint moves by a
//     whole FP4 step (up to a quarter of its magnitude), and the flips compound through every
//     Dgrad down to block 0: 3e-2 measured on the CPU from ulp-level differences (bound 0.1); on
//     CUDA the differences start at the BF16 level, so more elements flip (bound 0.3).
struct Tolerance {
  double loss;  // relative
  double grad;  // normwise relative, per parameter
};
constexpr Tolerance kCpuBf16{1e-5, 1e-4}, kCpuMxfp4{1e-4, 0.1}, kCudaBf16{1e-4, 1e-2}, kCudaMxfp4{1e-3, 0.3};

void check_close(const Pass& fused, const Pass& unfused, Tolerance tol) {
  CHECK(fused.loss.item<double>() == Approx(unfused.loss.item<double>()).epsilon(tol.loss));
  REQUIRE(fused.names == unfused.names);
  for (size_t i = 0; i < fused.grads.size(); ++i) {
    INFO(fused.names[i] << ": relative error " << rel_error(fused.grads[i], unfused.grads[i]));
    CHECK(rel_error(fused.grads[i], unfused.grads[i]) < tol.grad);
  }
}

std::string no_cuda_reason() {
  if (!torch::cuda::is_available()) return "no CUDA device (or a LibTorch without CUDA)";
  return {};
}

// A block's residual arithmetic, forward and backward, on `device`: the fused residual norms and
// add (fused_ops.h), or the composition they replace (x + branch, fused_rms_norm, autograd's
// sums and casts). The branches are elementwise functions of the norms' outputs, so every
// gradient path of a block is there: x read by the first norm and the add, h by the second norm
// and the last add.
std::vector<at::Tensor> residual_pass(bool fused, const at::Device& device, at::ScalarType branch_type) {
  at::Generator gen = at::detail::createCPUGenerator(31);
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  const at::Tensor x = at::randn({2, 6, 64}, gen, f32).to(device).requires_grad_(true);
  const at::Tensor w1 = (at::randn({64}, gen, f32) * 0.1 + 1.0).to(device).requires_grad_(true);
  const at::Tensor w2 = (at::randn({64}, gen, f32) * 0.1 + 1.0).to(device).requires_grad_(true);
  const at::Tensor k1 = at::randn({64}, gen, f32).to(device), k2 = at::randn({64}, gen, f32).to(device);
  const at::Tensor dout = at::randn({2, 6, 64}, gen, f32).to(device);
  const at::ScalarType normed_type = branch_type;
  at::Tensor out;
  if (fused) {
    const ResidualNormed in = fused_residual_rms_norm(x, at::Tensor(), w1, 1e-5, normed_type);
    const ResidualNormed h = fused_residual_rms_norm(in.stream, (in.normed * k1).to(branch_type), w2, 1e-5, normed_type);
    out = fused_residual_add(h.stream, (h.normed * k2).to(branch_type));
  } else {
    const at::Tensor h = x + (fused_rms_norm(x, w1, 1e-5, normed_type) * k1).to(branch_type);
    out = h + (fused_rms_norm(h, w2, 1e-5, normed_type) * k2).to(branch_type);
  }
  out.backward(dout);
  return {out.detach().cpu(), x.grad().cpu(), w1.grad().cpu(), w2.grad().cpu()};
}

void check_residual_fusion(const at::Device& device, at::ScalarType branch_type) {
  const std::vector<at::Tensor> fused = residual_pass(true, device, branch_type);
  const std::vector<at::Tensor> composed = residual_pass(false, device, branch_type);
  const char* names[] = {"block output", "dx", "dw (first norm)", "dw (second norm)"};
  for (size_t i = 0; i < fused.size(); ++i) {
    INFO(names[i] << " on " << device.str() << ", branch " << c10::toString(branch_type));
    CHECK(at::equal(fused[i], composed[i]));
  }
}

}  // namespace

TEST_CASE("The residual stream's fused norms and add give the composed ops' bits, gradients too",
          "[trainer][fused]") {
  for (at::ScalarType t : {at::kFloat, at::kBFloat16}) check_residual_fusion(at::kCPU, t);
}

TEST_CASE("On CUDA the residual stream's fused kernels give the composed ops' bits, gradients too",
          "[trainer][fused][gpu]") {
  const std::string why = no_cuda_reason();
  if (!why.empty()) MXABLATE_SKIP(why);
  for (at::ScalarType t : {at::kFloat, at::kBFloat16}) check_residual_fusion(at::kCUDA, t);
}

TEST_CASE("Fused RoPE keeps a dense input's layout, with the contiguous rotation's bits", "[trainer][fused]") {
  at::Generator gen = at::detail::createCPUGenerator(41);
  const at::Tensor proj = at::randn({2, 5, 3, 8}, gen, at::TensorOptions().dtype(at::kFloat));  // (B, T, H, D)
  const at::Tensor x = proj.transpose(1, 2);                                                 // (B, H, T, D) view
  const at::Tensor cos = at::randn({5, 4}, gen, at::TensorOptions().dtype(at::kFloat));
  const at::Tensor sin = at::randn({5, 4}, gen, at::TensorOptions().dtype(at::kFloat));
  const at::Tensor y = fused_rope(x, cos, sin);
  CHECK(y.strides() == x.strides());
  CHECK(y.transpose(1, 2).is_contiguous());  // merging the heads after attention is a view
  const at::Tensor want = kernels::rope(x, cos, sin, kernels::RopeDirection::kForward, at::kFloat);
  CHECK(want.is_contiguous());
  CHECK(at::equal(y, want));
  // A layout that is not dense with D contiguous: a contiguous result.
  const at::Tensor strided = at::randn({2, 3, 5, 16}, gen, at::TensorOptions().dtype(at::kFloat)).narrow(3, 0, 8);
  CHECK(fused_rope(strided, cos, sin).is_contiguous());
}

TEST_CASE("On the CPU the model keeps the unfused ops by default, bit for bit", "[trainer][fused]") {
  check_identical(forward_backward(FusedOps::kOnCuda, at::kCPU), forward_backward(FusedOps::kNever, at::kCPU));
}

TEST_CASE("The fused ops' CPU references wired into the model give the unfused loss and gradients",
          "[trainer][fused]") {
  check_close(forward_backward(FusedOps::kAlways, at::kCPU), forward_backward(FusedOps::kNever, at::kCPU), kCpuBf16);
  check_close(forward_backward(FusedOps::kAlways, at::kCPU, false, mxfp4_config()),
              forward_backward(FusedOps::kNever, at::kCPU, false, mxfp4_config()), kCpuMxfp4);
}

TEST_CASE("Checkpointed blocks recompute the fused ops bit for bit", "[trainer][fused][checkpointing]") {
  check_identical(forward_backward(FusedOps::kAlways, at::kCPU, true), forward_backward(FusedOps::kAlways, at::kCPU, false));
  check_identical(forward_backward(FusedOps::kAlways, at::kCPU, true, mxfp4_config()),
                  forward_backward(FusedOps::kAlways, at::kCPU, false, mxfp4_config()));
}

TEST_CASE("On CUDA the fused model gives the unfused loss and gradients", "[trainer][fused][gpu]") {
  const std::string why = no_cuda_reason();
  if (!why.empty()) MXABLATE_SKIP(why);
  check_close(forward_backward(FusedOps::kOnCuda, at::kCUDA), forward_backward(FusedOps::kNever, at::kCUDA),
              kCudaBf16);
  check_close(forward_backward(FusedOps::kOnCuda, at::kCUDA, false, mxfp4_config()),
              forward_backward(FusedOps::kNever, at::kCUDA, false, mxfp4_config()), kCudaMxfp4);
}

TEST_CASE("On CUDA the fused MXFP4 model repeats bit for bit, checkpointed or not", "[trainer][fused][gpu]") {
  const std::string why = no_cuda_reason();
  if (!why.empty()) MXABLATE_SKIP(why);
  // MXFP4 (not BF16: the CUDA BF16 path is not deterministic run to run, docs/performance.md).
  // The fused ops add no nondeterminism of their own; if the unfused model does not repeat on
  // this machine either (an attention kernel, say), there is nothing to compare against.
  if (!identical(forward_backward(FusedOps::kNever, at::kCUDA, false, mxfp4_config()),
                 forward_backward(FusedOps::kNever, at::kCUDA, false, mxfp4_config())))
    MXABLATE_SKIP("the unfused MXFP4 model does not repeat bit for bit on this GPU either");
  const Pass first = forward_backward(FusedOps::kOnCuda, at::kCUDA, false, mxfp4_config());
  check_identical(first, forward_backward(FusedOps::kOnCuda, at::kCUDA, false, mxfp4_config()));
  check_identical(first, forward_backward(FusedOps::kOnCuda, at::kCUDA, true, mxfp4_config()));
}

TEST_CASE("Fused producers make h, dg and du for their layers ahead and change no bit",
          "[trainer][fused][produce]") {
  // Per block, each layer takes what it asked for: down Q(h) along rows and down columns, gate
  // and up Q(dY) along rows and down columns; a checkpointed block's first forward pass takes
  // Q(h) along rows once more.
  const int64_t blocks = find_model_preset("smoke")->n_layers;
  for (const bool checkpointing : {false, true}) {
    for (const contract::RunConfig& config : {mxfp4_config(), mxfp4_sr_config()}) {
      INFO("checkpointing " << checkpointing << ", SR " << !config.quant.stochastic_rounding.empty());
      const Pass on = forward_backward(FusedOps::kAlways, at::kCPU, checkpointing, config, true);
      const Pass off = forward_backward(FusedOps::kAlways, at::kCPU, checkpointing, config, false);
      check_identical(on, off);
      CHECK(off.made_ahead == 0);
      CHECK(on.made_ahead == blocks * (checkpointing ? 7 : 6));
    }
  }
  // BF16 GEMMs quantize nothing: nothing is made ahead.
  CHECK(forward_backward(FusedOps::kAlways, at::kCPU).made_ahead == 0);
}

TEST_CASE("On CUDA the fused producers' kernels change no bit of the MXFP4 model", "[trainer][fused][produce][gpu]") {
  const std::string why = no_cuda_reason();
  if (!why.empty()) MXABLATE_SKIP(why);
  const int64_t blocks = find_model_preset("smoke")->n_layers;
  for (const contract::RunConfig& config : {mxfp4_config(), mxfp4_sr_config()}) {
    const Pass off = forward_backward(FusedOps::kOnCuda, at::kCUDA, true, config, false);
    if (!identical(off, forward_backward(FusedOps::kOnCuda, at::kCUDA, true, config, false)))
      MXABLATE_SKIP("the MXFP4 model does not repeat bit for bit on this GPU");
    const Pass on = forward_backward(FusedOps::kOnCuda, at::kCUDA, true, config, true);
    check_identical(on, off);
    CHECK(on.made_ahead == blocks * 7);
  }
}
