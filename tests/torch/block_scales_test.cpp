// element_scales must give the scale the quantizer itself used: Q(x) / s lands on the E2M1 grid
// for every element, along rows and down columns, for MXFP4 (each scale rule) and NVFP4; for
// MXFP4 under the floor rule s is 2^(floor(log2 amax) - 2) of the element's block, computed here
// independently.
#include <ATen/ATen.h>

#include <cmath>
#include <stdexcept>

#include "catch.h"
#include "mxablate/kernels/torch/block_scales.h"
#include "mxablate/kernels/torch/fake_quantize.h"
#include "test_tensors.h"

using namespace mxablate;
using kernels::Axis;
using kernels::QuantFormat;
using kernels::QuantSpec;

namespace {

// True when every element of v is one of 0, ±0.5, ±1, ±1.5, ±2, ±3, ±4, ±6, to a relative
// `tolerance` (NVFP4 values are (code × block scale) × global in float32, and s = block scale ×
// global rounds on its own: Q(x) / s is the code to a few ulps; MXFP4's are exact).
bool on_e2m1_grid(const at::Tensor& v, double tolerance) {
  const at::Tensor a = v.abs().to(at::kDouble);
  at::Tensor hit = at::zeros_like(a, at::kBool);
  for (double g : {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0}) hit = hit | ((a - g).abs() <= tolerance * g);
  return hit.all().item<bool>();
}

}  // namespace

TEST_CASE("element_scales are the scales fake_quantize rounds with", "[torch][block_scales]") {
  at::Generator gen = at::detail::createCPUGenerator(11);
  const at::Tensor x = test::activation_like(64, 96, 3) * at::exp(at::randn({64, 96}, gen));
  const kernels::RngKey key{1, 2, 3, kernels::GemmKind::kFprop, kernels::Operand::kB};
  for (QuantFormat f : {QuantFormat::kMXFP4, QuantFormat::kNVFP4}) {
    for (kernels::ScaleRule rule : {kernels::ScaleRule::kFloor, kernels::ScaleRule::kCeil}) {
      if (f == QuantFormat::kNVFP4 && rule != kernels::ScaleRule::kFloor) continue;
      for (Axis axis : {Axis::kRows, Axis::kCols}) {
        QuantSpec spec{f};
        spec.scale_rule = rule;
        INFO(kernels::to_string(f) << " " << kernels::to_string(rule) << " " << kernels::to_string(axis));
        const at::Tensor s = kernels::element_scales(x, axis, spec, key);
        REQUIRE(s.sizes() == x.sizes());
        REQUIRE(s.scalar_type() == at::kFloat);
        CHECK((s > 0).all().item<bool>());
        const at::Tensor q = kernels::fake_quantize(x, axis, spec, key);
        CHECK(on_e2m1_grid(q / s, f == QuantFormat::kMXFP4 ? 0.0 : 1e-6));
        // and s is not merely a divisor of the grid: the largest |x| / s lies in the range the
        // scale rule maps block maxima to (below 8 under floor, at most 6 under ceil; NVFP4 block
        // scales are E4M3 rounded to nearest, so at most half an E4M3 step above 6).
        const double top = (x.abs() / s).max().item<double>();
        CHECK(top > 3.0);
        const double bound = f == QuantFormat::kNVFP4             ? 6.0 * (1 + 1.0 / 16)
                             : rule == kernels::ScaleRule::kFloor ? 8.0
                                                                  : 6.0;
        CHECK(top <= bound);
      }
    }
  }
}

TEST_CASE("element_scales under the MXFP4 floor rule equal 2^(floor(log2 amax) - 2) per block",
          "[torch][block_scales]") {
  const at::Tensor x = test::activation_like(8, 64, 5);
  const QuantSpec spec{QuantFormat::kMXFP4};
  const at::Tensor s = kernels::element_scales(x, Axis::kRows, spec, {});
  const at::Tensor amax = x.reshape({8, 2, 32}).abs().amax(-1, true);
  const at::Tensor expected =
      at::exp2(at::floor(at::log2(amax)) - 2).expand({8, 2, 32}).reshape({8, 64});
  CHECK(at::equal(s, expected));
}

TEST_CASE("element_scales refuses formats without E2M1 block scales", "[torch][block_scales]") {
  const at::Tensor x = at::ones({4, 32});
  CHECK_THROWS_AS(kernels::element_scales(x, Axis::kRows, QuantSpec{QuantFormat::kBF16}, {}),
                  std::invalid_argument);
  CHECK_THROWS_AS(kernels::element_scales(x, Axis::kRows, QuantSpec{QuantFormat::kFP8E4M3}, {}),
                  std::invalid_argument);
  CHECK_THROWS_AS(kernels::element_scales(at::ones({4, 20}), Axis::kRows, QuantSpec{QuantFormat::kMXFP4}, {}),
                  std::invalid_argument);  // 20 is not a multiple of the block
}
