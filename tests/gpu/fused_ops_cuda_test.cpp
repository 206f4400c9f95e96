// The fused common-path kernels on CUDA tensors against the unfused LibTorch computation in
// float32 on the same GPU (docs/design.md §4). Tolerances:
//   - bf16 outputs: within one bf16 ulp of the float32 reference rounded to bf16 (the fused
//     kernel rounds its own float32 result once; the two float32 results differ in the last bits);
//   - float32 outputs that are products (RMSNorm's y, SwiGLU's h, per-row losses): elementwise
//     relative 1e-5; RoPE's are the same four products and two sums as ATen's, so bit for bit;
//   - gradients that subtract nearly equal terms (RMSNorm's dx, SwiGLU's dg, CE's dlogits):
//     normwise relative 1e-5, since elementwise relative error is unbounded near a cancellation.
// Also: dweight and every other output are the same bits on a second call (no atomics), and the
// kernels' 16-byte vector paths give the same bits as their scalar fallbacks (taken for views one
// element off a 16-byte boundary, strides that are not whole vectors, and short rows/tails).
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <torch/autograd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "catch.h"
#include "mxablate/kernels/torch/fused_ops.h"
#include "residual_checks.h"
#include "test_tensors.h"
#include "unfused_ops.h"

using namespace mxablate::kernels;
using namespace mxablate::test;

namespace {

const at::TensorOptions kCuda = at::TensorOptions().dtype(at::kFloat).device(at::kCUDA);

at::Tensor randn(at::IntArrayRef shape, uint64_t seed, double scale = 1.0) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  return (at::randn(shape, gen, at::TensorOptions().dtype(at::kFloat)) * scale).to(at::kCUDA);
}

// max |got - want| / |want| over elements (float32 results that are products: no cancellation).
double max_elementwise_rel(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor g = got.cpu().to(at::kDouble), w = want.cpu().to(at::kDouble);
  const at::Tensor denom = w.abs().clamp_min(std::numeric_limits<float>::min());
  return ((g - w).abs() / denom).max().item<double>();
}

// bf16 bit patterns as ordered integers: neighbours in value differ by one.
at::Tensor ordered_bf16(const at::Tensor& t) {
  const at::Tensor bits = t.cpu().contiguous().view(at::kShort).to(at::kInt);
  const at::Tensor magnitude = bits.bitwise_and(0x7FFF);
  return at::where(bits.lt(0), -magnitude, magnitude);
}

// Every element of the bf16 `got` within one bf16 ulp of the float32 `want` rounded to bf16.
bool within_one_bf16_ulp(const at::Tensor& got, const at::Tensor& want) {
  if (got.scalar_type() != at::kBFloat16 || got.sizes() != want.sizes()) return false;
  const at::Tensor diff = (ordered_bf16(got) - ordered_bf16(want.to(at::kBFloat16))).abs();
  return diff.max().item<int>() <= 1;
}

// Rows of ordinary activations, then a huge row and a tiny one (the sum of squares stays finite
// and normal in float32 for both).
at::Tensor norm_input(int64_t rows, int64_t cols, uint64_t seed) {
  at::Tensor x = randn({rows, cols}, seed);
  x.select(0, 0).mul_(1.0e15);
  x.select(0, rows - 1).mul_(1.0e-18);
  return x;
}

bool aligned16(const at::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; }

// A copy of `t` (contiguous, same sizes and dtype) whose data starts one element past a 16-byte
// boundary: the kernels must take their scalar path for it.
at::Tensor misaligned_copy(const at::Tensor& t) {
  const at::Tensor storage = at::empty({t.numel() + 1}, t.options());
  at::Tensor view = storage.narrow(0, 1, t.numel()).view(t.sizes());
  view.copy_(t);
  return view;
}

// RMSNorm's forward as the kernel computes it, in float32 on the CPU: lane l of a warp of `lanes`
// adds the squares of columns l, l + lanes, ... in that order, the butterfly adds lane l ^ offset
// for offsets lanes/2 down to 1, then rstd = 1 / sqrtf(sum / cols + eps), y = (x * rstd) * w.
// (Each operation one rounding: the kernels are built without FMA contraction, and so is this
// test's float arithmetic on x86-64 without -mfma.)
std::pair<std::vector<float>, std::vector<float>> emulated_rms_norm(const at::Tensor& x, const at::Tensor& w, float eps,
                                                                     int lanes) {
  const at::Tensor xc = x.cpu().contiguous(), wc = w.cpu().contiguous();
  const int64_t rows = xc.size(0), cols = xc.size(1);
  const float* xp = xc.data_ptr<float>();
  const float* wp = wc.data_ptr<float>();
  std::vector<float> y(static_cast<size_t>(rows * cols)), rstd(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> part(static_cast<size_t>(lanes), 0.0f);
    for (int l = 0; l < lanes; ++l)
      for (int64_t j = l; j < cols; j += lanes) {
        const float v = xp[r * cols + j];
        const float sq = v * v;
        part[static_cast<size_t>(l)] = part[static_cast<size_t>(l)] + sq;
      }
    for (int offset = lanes / 2; offset > 0; offset >>= 1) {
      std::vector<float> next(part.size());
      for (int l = 0; l < lanes; ++l)
        next[static_cast<size_t>(l)] = part[static_cast<size_t>(l)] + part[static_cast<size_t>(l ^ offset)];
      part = next;
    }
    const float mean = part[0] / static_cast<float>(cols);
    const float rs = 1.0f / std::sqrt(mean + eps);
    rstd[static_cast<size_t>(r)] = rs;
    for (int64_t j = 0; j < cols; ++j) {
      const float scaled = xp[r * cols + j] * rs;
      y[static_cast<size_t>(r * cols + j)] = scaled * wp[j];
    }
  }
  return {y, rstd};
}

bool equals_bits(const at::Tensor& t, const std::vector<float>& want) {
  const at::Tensor c = t.cpu().contiguous();
  return c.numel() == static_cast<int64_t>(want.size()) &&
         std::memcmp(c.data_ptr<float>(), want.data(), want.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("fused RMSNorm forward on CUDA is its lane-strided reduction, bit for bit", "[gpu][fused]") {
  // The reduction's order is the kernel's contract with every earlier run (its bits are the
  // model's): however the loads are batched, lane l adds its columns in column order. Rows
  // shorter than a warp, not a multiple of it, and longer than the kernel's unrolled chunk.
  const int lanes = at::cuda::getCurrentDeviceProperties()->warpSize;
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
           {5, 4}, {7, 100}, {37, 768}, {6, 264}, {9, 2048}, {3, 4100}, {4, 4104}, {2, 8192}}) {
    INFO(rows << " x " << cols);
    const at::Tensor x = norm_input(rows, cols, 91);
    const at::Tensor w = randn({cols}, 92, 0.1) + 1.0;
    const auto [y, rstd] = emulated_rms_norm(x, w, 1e-5f, lanes);
    const RmsNormOutput out = rms_norm_forward(x, w, 1e-5, at::kFloat);
    CHECK(equals_bits(out.rstd, rstd));
    CHECK(equals_bits(out.y, y));
    // The fused add normalizes x + branch the same way.
    const at::Tensor b = randn({rows, cols}, 93).to(at::kBFloat16);
    const auto [yh, rstd_h] = emulated_rms_norm(x + b, w, 1e-5f, lanes);
    const AddRmsNormOutput added = add_rms_norm_forward(x, b, w, 1e-5, at::kFloat);
    CHECK(equals_bits(added.norm.rstd, rstd_h));
    CHECK(equals_bits(added.norm.y, yh));
  }
}

TEST_CASE("fused RMSNorm forward: the vector and the scalar kernels give the same bits", "[gpu][fused]") {
  // cols % 8 == 0 with every pointer 16-byte aligned takes the vector kernel (its chunks of eight
  // columns a lane pass through shared memory for the strided sum); a misaligned x the scalar one.
  // Every input, output and branch dtype; rows whose last chunk or batch of chunks is partial.
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
           {4, 8}, {11, 264}, {37, 768}, {9, 2048}, {3, 4104}}) {
    const at::Tensor x = norm_input(rows, cols, 101);
    const at::Tensor w = randn({cols}, 102, 0.1) + 1.0;
    for (at::ScalarType out_type : {at::kFloat, at::kBFloat16}) {
      for (at::ScalarType x_type : {at::kFloat, at::kBFloat16}) {
        INFO(rows << " x " << cols << ", x " << c10::toString(x_type) << ", y " << c10::toString(out_type));
        const at::Tensor xt = x.to(x_type), x_off = misaligned_copy(xt);
        REQUIRE(aligned16(xt));
        REQUIRE_FALSE(aligned16(x_off));
        const RmsNormOutput vec = rms_norm_forward(xt, w, 1e-5, out_type);
        const RmsNormOutput scalar = rms_norm_forward(x_off, w, 1e-5, out_type);
        CHECK(same_bits(vec.y, scalar.y));
        CHECK(same_bits(vec.rstd, scalar.rstd));
      }
      for (at::ScalarType branch_type : {at::kFloat, at::kBFloat16}) {
        INFO(rows << " x " << cols << ", add " << c10::toString(branch_type) << ", y " << c10::toString(out_type));
        const at::Tensor b = randn({rows, cols}, 103).to(branch_type);
        const AddRmsNormOutput vec = add_rms_norm_forward(x, b, w, 1e-5, out_type);
        const AddRmsNormOutput scalar = add_rms_norm_forward(misaligned_copy(x), b, w, 1e-5, out_type);
        CHECK(same_bits(vec.h, scalar.h));
        CHECK(same_bits(vec.norm.y, scalar.norm.y));
        CHECK(same_bits(vec.norm.rstd, scalar.norm.rstd));
      }
    }
  }
}

TEST_CASE("fused RMSNorm backward: the vector and the scalar kernels give the same bits", "[gpu][fused]") {
  // cols % 4 == 0 and one, two or four 4-column vectors per thread take the vector kernel
  // (768: the trainer's d; 4: one vector in all; 1028: two slots; 4096: four); 4100 needs five
  // slots and 771 is no multiple of 4: scalar either way. 3000 rows leave the last blocks empty.
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
           {37, 768}, {3000, 768}, {5, 4}, {9, 1028}, {3, 4096}, {2, 4100}, {6, 771}}) {
    INFO(rows << " x " << cols);
    const at::Tensor x = norm_input(rows, cols, 71);
    const at::Tensor w = randn({cols}, 72, 0.1) + 1.0;
    const at::Tensor rstd = rms_norm_forward(x, w, 1e-5, at::kFloat).rstd;
    for (at::ScalarType dy_type : {at::kFloat, at::kBFloat16}) {
      const at::Tensor dy = randn({rows, cols}, 73).to(dy_type);
      const RmsNormGrads vec = rms_norm_backward(dy, x, w, rstd);
      const at::Tensor dy_off = misaligned_copy(dy), x_off = misaligned_copy(x);
      REQUIRE(aligned16(dy));
      REQUIRE_FALSE(aligned16(dy_off));
      REQUIRE_FALSE(aligned16(x_off));
      const RmsNormGrads scalar_dy = rms_norm_backward(dy_off, x, w, rstd);
      const RmsNormGrads scalar_x = rms_norm_backward(dy, x_off, w, rstd);
      CHECK(same_bits(scalar_dy.dx, vec.dx));
      CHECK(same_bits(scalar_dy.dweight, vec.dweight));
      CHECK(same_bits(scalar_x.dx, vec.dx));
      CHECK(same_bits(scalar_x.dweight, vec.dweight));
      CHECK(rel_error(vec.dx, rms_norm_backward(dy.to(at::kFloat), x, w, rstd).dx) < 1e-6);
    }
    // bf16 x (the vector kernel's 8-byte loads of x).
    const at::Tensor xb = x.to(at::kBFloat16), dy = randn({rows, cols}, 74);
    const at::Tensor rstd_b = rms_norm_forward(xb, w, 1e-5, at::kFloat).rstd;
    const RmsNormGrads vec = rms_norm_backward(dy, xb, w, rstd_b);
    const RmsNormGrads scalar = rms_norm_backward(dy, misaligned_copy(xb), w, rstd_b);
    CHECK(same_bits(scalar.dx, vec.dx));
    CHECK(same_bits(scalar.dweight, vec.dweight));
  }
}

TEST_CASE("the residual stream's fused ops on CUDA are the composed CUDA ops bit for bit", "[gpu][fused]") {
  // The same shapes as above: the vector and the scalar backward kernels, the forward's one.
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
           {37, 768}, {3000, 768}, {5, 4}, {9, 1028}, {3, 4096}, {2, 4100}, {6, 771}}) {
    const at::Tensor x = norm_input(rows, cols, 81);
    const at::Tensor w = randn({cols}, 82, 0.1) + 1.0;
    const at::Tensor dy = randn({rows, cols}, 84).to(at::kBFloat16);
    const at::Tensor dres = randn({rows, cols}, 85, 0.01);
    for (at::ScalarType branch_type : {at::kFloat, at::kBFloat16}) {
      INFO(rows << " x " << cols << ", branch " << c10::toString(branch_type));
      const at::Tensor b = randn({rows, cols}, 83).to(branch_type);
      check_add_rms_norm_composes(x, b, w);
      CHECK(same_bits(residual_add(misaligned_copy(x), b), x + b));  // the scalar loop
      check_residual_backward_composes(x + b, w, dy, dres, dres, branch_type);
      // A misaligned dres sends every shape to the scalar kernel: the same bits.
      check_residual_backward_composes(x + b, w, dy, dres, misaligned_copy(dres), branch_type);
    }
  }
}

TEST_CASE("to_float32 on CUDA is ATen's widening bit for bit, vector and scalar paths", "[gpu][fused]") {
  check_to_float32_widens(at::kCUDA);
}

TEST_CASE("fused SwiGLU: the vector and the scalar paths give the same bits", "[gpu][fused]") {
  // Shorter than one 8-element vector, one vector, a vector and a tail, many vectors and a tail.
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{9}, int64_t{1023}, int64_t{4096} + 5}) {
    for (at::ScalarType in_type : {at::kFloat, at::kBFloat16}) {
      INFO(n << (in_type == at::kFloat ? " float32" : " bf16"));
      const at::Tensor g = randn({n}, 81, 4.0).to(in_type), u = randn({n}, 82).to(in_type);
      const at::Tensor dh = randn({n}, 83).to(in_type);
      const at::Tensor g_off = misaligned_copy(g), u_off = misaligned_copy(u), dh_off = misaligned_copy(dh);
      REQUIRE(aligned16(g));
      REQUIRE_FALSE(aligned16(g_off));
      for (at::ScalarType out_type : {at::kFloat, at::kBFloat16}) {
        const at::Tensor h = swiglu_forward(g, u, out_type);
        CHECK(same_bits(swiglu_forward(g_off, u, out_type), h));
        CHECK(same_bits(swiglu_forward(g, u_off, out_type), h));
        // The elements are independent: the first k of a longer input are those of its first k.
        if (n > 1) CHECK(same_bits(swiglu_forward(g.narrow(0, 0, n - 1), u.narrow(0, 0, n - 1), out_type),
                                   h.narrow(0, 0, n - 1)));
      }
      const SwiGluGrads vec = swiglu_backward(dh, g, u);
      for (const SwiGluGrads& scalar : {swiglu_backward(dh_off, g, u), swiglu_backward(dh, g_off, u_off)}) {
        CHECK(same_bits(scalar.dg, vec.dg));
        CHECK(same_bits(scalar.du, vec.du));
      }
      // bf16 gradient from a float32 input and back: mixed-type vectors.
      const at::Tensor dh_other = dh.to(in_type == at::kFloat ? at::kBFloat16 : at::kFloat);
      const SwiGluGrads mixed = swiglu_backward(dh_other, g, u);
      const SwiGluGrads mixed_scalar = swiglu_backward(misaligned_copy(dh_other), g, u);
      CHECK(same_bits(mixed_scalar.dg, mixed.dg));
      CHECK(same_bits(mixed_scalar.du, mixed.du));
    }
  }
}

TEST_CASE("fused RoPE: the vector and the scalar paths give the same bits", "[gpu][fused]") {
  // head_dim 64 and 16 (half a multiple of 8: vectors), 12 (half 6: scalar only); heads of 1.
  for (const auto& shape : std::vector<std::vector<int64_t>>{{2, 17, 3, 64}, {1, 9, 1, 16}, {2, 5, 2, 12}}) {
    const int64_t b = shape[0], t = shape[1], h = shape[2], d = shape[3];
    const at::Tensor inv = at::pow(10000.0, -at::arange(0, d / 2, at::kDouble) * 2.0 / static_cast<double>(d));
    const at::Tensor angles = at::outer(at::arange(0, t, at::kDouble), inv);
    const at::Tensor cos = angles.cos().to(kCuda), sin = angles.sin().to(kCuda);
    for (at::ScalarType type : {at::kFloat, at::kBFloat16}) {
      INFO(b << " " << t << " " << h << " " << d << (type == at::kFloat ? " float32" : " bf16"));
      const at::Tensor base = randn({b, t, h, d}, 91).to(type);
      const at::Tensor x = base.transpose(1, 2);
      // Off a 16-byte boundary; and aligned but with (B, T, H) strides of d + 1 elements.
      const at::Tensor x_off = misaligned_copy(base).transpose(1, 2);
      at::Tensor wide = at::zeros({b, t, h, d + 1}, base.options());
      wide.narrow(3, 0, d).copy_(base);
      const at::Tensor x_strided = wide.narrow(3, 0, d).transpose(1, 2);
      REQUIRE_FALSE(aligned16(x_off));
      for (RopeDirection dir : {RopeDirection::kForward, RopeDirection::kInverse}) {
        for (at::ScalarType out_type : {at::kFloat, at::kBFloat16}) {
          const at::Tensor y = rope(x, cos, sin, dir, out_type);
          CHECK(same_bits(rope(x_off, cos, sin, dir, out_type), y));
          CHECK(same_bits(rope(x_strided, cos, sin, dir, out_type), y));
          // A misaligned output (rope_into): the scalar path again.
          const at::Tensor out_off = misaligned_copy(at::zeros({b, h, t, d}, base.options().dtype(out_type)));
          rope_into(x, cos, sin, dir, out_off);
          CHECK(same_bits(out_off, y));
        }
      }
    }
  }
}

TEST_CASE("fused RMSNorm on CUDA equals the unfused formula", "[gpu][fused]") {
  const double eps = 1e-5;
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{37, 771}, {1000, 768}, {5, 64}, {3, 4099}}) {
    INFO(rows << " x " << cols);
    const at::Tensor x = norm_input(rows, cols, 21);
    const at::Tensor w = randn({cols}, 22, 0.1) + 1.0;
    const at::Tensor want = unfused_rms_norm(x, w, eps);
    const RmsNormOutput f32 = rms_norm_forward(x, w, eps, at::kFloat);
    CHECK(max_elementwise_rel(f32.y, want) < 1e-5);
    CHECK(within_one_bf16_ulp(rms_norm_forward(x, w, eps, at::kBFloat16).y, want));
    // bf16 input: against the reference on its exact float32 values.
    const at::Tensor xb = x.to(at::kBFloat16);
    CHECK(within_one_bf16_ulp(rms_norm_forward(xb, w, eps, at::kBFloat16).y, unfused_rms_norm(xb.to(at::kFloat), w, eps)));

    const at::Tensor xg = x.clone().requires_grad_(true), wg = w.clone().requires_grad_(true);
    const at::Tensor dy = randn({rows, cols}, 23);
    unfused_rms_norm(xg, wg, eps).backward(dy);
    const RmsNormGrads g = rms_norm_backward(dy, x, w, f32.rstd);
    CHECK(rel_error(g.dx, xg.grad()) < 1e-5);
    CHECK(rel_error(g.dweight, wg.grad()) < 1e-5);
    const RmsNormGrads again = rms_norm_backward(dy, x, w, f32.rstd);
    CHECK(same_bits(again.dweight, g.dweight));
    CHECK(same_bits(again.dx, g.dx));
    // A bf16 gradient from a bf16 output: the reference on its exact float32 values.
    const at::Tensor dyb = dy.to(at::kBFloat16);
    CHECK(rel_error(rms_norm_backward(dyb, x, w, f32.rstd).dx, rms_norm_backward(dyb.to(at::kFloat), x, w, f32.rstd).dx) < 1e-6);
  }
}

TEST_CASE("fused RMSNorm refuses rows longer than its shared-memory partials on CUDA", "[gpu][fused]") {
  const at::Tensor x = randn({2, 8193}, 24), w = at::ones({8193}, kCuda);
  const RmsNormOutput f = rms_norm_forward(x, w, 1e-5, at::kFloat);  // forward has no limit
  CHECK_THROWS_WITH(rms_norm_backward(x, x, w, f.rstd),
                    "rmsnorm_backward: rows longer than 8192 are not supported, got 8193");
}

TEST_CASE("fused SwiGLU on CUDA equals silu(g) * u and its autograd", "[gpu][fused]") {
  for (int64_t n : {int64_t{1}, int64_t{9}, int64_t{1023}, int64_t{3} * 5 * 1377}) {
    INFO(n);
    const at::Tensor g = randn({n}, 31, 4.0), u = randn({n}, 32);
    const at::Tensor want = at::silu(g) * u;
    CHECK(max_elementwise_rel(swiglu_forward(g, u, at::kFloat), want) < 1e-5);
    CHECK(within_one_bf16_ulp(swiglu_forward(g, u, at::kBFloat16), want));
    const at::Tensor gb = g.to(at::kBFloat16), ub = u.to(at::kBFloat16);
    CHECK(within_one_bf16_ulp(swiglu_forward(gb, ub, at::kBFloat16), at::silu(gb.to(at::kFloat)) * ub.to(at::kFloat)));

    const at::Tensor gg = g.clone().requires_grad_(true), ug = u.clone().requires_grad_(true);
    const at::Tensor dh = randn({n}, 33);
    (at::silu(gg) * ug).backward(dh);
    const SwiGluGrads grads = swiglu_backward(dh, g, u);
    CHECK(rel_error(grads.dg, gg.grad()) < 1e-5);
    CHECK(max_elementwise_rel(grads.du, ug.grad()) < 1e-5);
    const SwiGluGrads gbf = swiglu_backward(dh.to(at::kBFloat16), gb, ub);
    const SwiGluGrads gref = swiglu_backward(dh.to(at::kBFloat16).to(at::kFloat), gb.to(at::kFloat), ub.to(at::kFloat));
    CHECK(within_one_bf16_ulp(gbf.dg, gref.dg));
    CHECK(within_one_bf16_ulp(gbf.du, gref.du));
    CHECK(same_bits(swiglu_backward(dh, g, u).dg, grads.dg));
  }
}

TEST_CASE("fused RoPE on CUDA equals the unfused rotation bit for bit, both directions", "[gpu][fused]") {
  for (const auto& shape : std::vector<std::vector<int64_t>>{{2, 17, 3, 64}, {1, 5, 1, 2}, {3, 9, 4, 6}, {2, 33, 5, 16}}) {
    const int64_t b = shape[0], t = shape[1], h = shape[2], d = shape[3];
    INFO(b << " " << t << " " << h << " " << d);
    const at::Tensor inv = at::pow(10000.0, -at::arange(0, d / 2, at::kDouble) * 2.0 / static_cast<double>(d));
    const at::Tensor angles = at::outer(at::arange(0, t, at::kDouble), inv);
    const at::Tensor cos = angles.cos().to(kCuda), sin = angles.sin().to(kCuda);
    // The model's layout: a (B, T, H, D) projection viewed as (B, H, T, D).
    const at::Tensor base = randn({b, t, h, d}, 41);
    const at::Tensor x = base.transpose(1, 2);
    const at::Tensor want = unfused_rope(x, cos, sin);
    const at::Tensor y = rope(x, cos, sin, RopeDirection::kForward, at::kFloat);
    CHECK(y.is_contiguous());
    CHECK(same_bits(y, want));  // x1 cos - x2 sin etc.: the same operations, no FMA either side
    CHECK(same_bits(rope(x, cos, sin, RopeDirection::kForward, at::kBFloat16), want.to(at::kBFloat16)));
    const at::Tensor xb = x.to(at::kBFloat16);
    CHECK(same_bits(rope(xb, cos, sin, RopeDirection::kForward, at::kBFloat16),
                    unfused_rope(xb.to(at::kFloat), cos, sin).to(at::kBFloat16)));

    const at::Tensor bg = base.clone().requires_grad_(true);
    const at::Tensor dy = randn({b, h, t, d}, 42);
    unfused_rope(bg.transpose(1, 2), cos, sin).backward(dy);
    const at::Tensor dx = at::empty_strided(x.sizes(), x.strides(), kCuda);
    rope_into(dy, cos, sin, RopeDirection::kInverse, dx);
    CHECK(at::equal(dx.cpu(), bg.grad().transpose(1, 2).cpu()));
  }
}

TEST_CASE("fused cross-entropy on CUDA equals at::cross_entropy_loss and its gradient", "[gpu][fused]") {
  for (const auto& [rows, vocab] : std::vector<std::pair<int64_t, int64_t>>{{37, 1000}, {4, 50257}, {65, 7}, {1, 3}}) {
    INFO(rows << " x " << vocab);
    at::Tensor logits = randn({rows, vocab}, 51, 3.0);
    logits.select(0, 0).mul_(1.0e4);  // huge magnitudes: the max subtraction matters
    if (rows > 1) logits.select(0, 1).mul_(1.0e-30);  // tiny: nearly uniform softmax
    at::Generator gen = at::detail::createCPUGenerator(52);
    const at::Tensor targets = at::randint(vocab, {rows}, gen, at::TensorOptions().dtype(at::kLong)).to(at::kCUDA);
    const at::Tensor lg = logits.clone().requires_grad_(true);
    const at::Tensor want_rows = at::cross_entropy_loss(logits, targets, {}, at::Reduction::None);
    at::cross_entropy_loss(lg, targets).backward();

    const CrossEntropyOutput out = cross_entropy_forward(logits, targets);
    // logsumexp - x[t] cancels: the error scales with the row's largest magnitude, not the loss.
    const at::Tensor scale = logits.abs().amax(1).clamp_min(1.0);
    CHECK(((out.loss - want_rows).abs() / scale).max().item<double>() < 1e-5);
    CHECK(out.loss.mean().item<double>() == Approx(at::cross_entropy_loss(logits, targets).item<double>()).epsilon(1e-5));
    const at::Tensor one = at::ones({}, kCuda);
    const at::Tensor dl = cross_entropy_backward(one, logits, targets, out.lse);
    CHECK(rel_error(dl, lg.grad()) < 1e-5);
    CHECK(same_bits(cross_entropy_backward(one, logits, targets, out.lse), dl));
    CHECK(same_bits(cross_entropy_forward(logits, targets).loss, out.loss));

    // bf16 logits: bf16 gradients within one ulp of the float32 computation on the same values.
    const at::Tensor lb = logits.to(at::kBFloat16);
    const CrossEntropyOutput ob = cross_entropy_forward(lb, targets);
    const CrossEntropyOutput of = cross_entropy_forward(lb.to(at::kFloat), targets);
    CHECK(same_bits(ob.lse, of.lse));
    CHECK(within_one_bf16_ulp(cross_entropy_backward(one, lb, targets, ob.lse),
                              cross_entropy_backward(one, lb.to(at::kFloat), targets, of.lse)));
  }
}

TEST_CASE("fused cross-entropy on CUDA gives an out-of-range target's row NaN", "[gpu][fused]") {
  const at::Tensor logits = randn({3, 10}, 61);
  const at::Tensor targets = at::tensor({1, 10, -3}, at::kLong).to(at::kCUDA);
  const at::Tensor loss = cross_entropy_forward(logits, targets).loss.cpu();
  CHECK(std::isfinite(loss[0].item<float>()));
  CHECK(std::isnan(loss[1].item<float>()));
  CHECK(std::isnan(loss[2].item<float>()));
}
