// The composite-operator emulation (the benchmark's baseline) computes the same function as the
// reference where it claims to: finite inputs, round-to-nearest, no rotation.
#include <ATen/ATen.h>

#include <stdexcept>
#include <string>

#include "catch.h"
#include "mxablate/kernels/torch/composite_emulation.h"
#include "mxablate/kernels/torch/fake_quantize.h"
#include "test_tensors.h"

using namespace mxablate::kernels;
using mxablate::test::activation_like;
using mxablate::test::same_bits;

TEST_CASE("composite emulation equals fake_quantize for finite inputs and round-to-nearest", "[torch][composite]") {
  const at::Tensor x = activation_like(64, 128, 17);
  const std::vector<QuantSpec> specs{
      {QuantFormat::kMXFP4, ScaleRule::kFloor}, {QuantFormat::kMXFP4, ScaleRule::kCeil},
      {QuantFormat::kMXFP4, ScaleRule::kEven},  {QuantFormat::kNVFP4},
      {QuantFormat::kFP8E4M3},                  {QuantFormat::kFP8E5M2},
      {QuantFormat::kBF16}};
  for (const QuantSpec& spec : specs) {
    for (Axis axis : {Axis::kRows, Axis::kCols}) {
      for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
        INFO(to_string(spec.format) << " " << to_string(spec.scale_rule) << " " << to_string(axis) << " " << dtype);
        const at::Tensor xt = x.to(dtype);
        CHECK(same_bits(composite_fake_quantize(xt, axis, spec, {}), fake_quantize(xt, axis, spec, {})));
      }
    }
  }
}

TEST_CASE("composite emulation refuses 2-D blocks rather than quietly using 1-D ones", "[torch][composite]") {
  const at::Tensor x = activation_like(64, 128, 19);
  QuantSpec spec{QuantFormat::kMXFP4};
  spec.blocks = BlockShape::k2D;
  try {
    (void)composite_fake_quantize(x, Axis::kRows, spec, {});
    FAIL("composite_fake_quantize accepted 2-D blocks");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()) == "composite_fake_quantize does not implement 2-D blocks; use fake_quantize");
  }
  // The exact path has them: W and Wᵀ agree.
  CHECK(same_bits(fake_quantize(x, Axis::kRows, spec, {}), fake_quantize(x, Axis::kCols, spec, {})));
  spec.format = QuantFormat::kFP8E4M3;  // formats without block scales ignore the setting
  CHECK_NOTHROW(composite_fake_quantize(x, Axis::kRows, spec, {}));
}

TEST_CASE("composite emulation with rotation and SR stays close to the reference", "[torch][composite]") {
  const at::Tensor x = activation_like(64, 128, 18);
  const QuantSpec spec{QuantFormat::kMXFP4, ScaleRule::kFloor, Rounding::kStochastic, HadamardMode::kFixedRandom, 32};
  const RngKey key{3, 4, 5, GemmKind::kWgrad, Operand::kA};
  const at::Tensor a = composite_fake_quantize(x, Axis::kCols, spec, key);
  const at::Tensor b = fake_quantize(x, Axis::kCols, spec, key);
  const QuantSpec rotate_only{QuantFormat::kFP32, ScaleRule::kFloor, Rounding::kNearest, HadamardMode::kFixedRandom, 32};
  const at::Tensor rotated = fake_quantize(x, Axis::kCols, rotate_only, key);
  // Both are stochastic roundings of the same rotated tensor: each within one grid step of it,
  // so their relative distance is of the order of MXFP4's error (~0.1–0.2), far below 1.
  const double rel = ((a - b).norm() / rotated.norm()).item<double>();
  CHECK(rel < 0.35);
  CHECK(((a - rotated).norm() / rotated.norm()).item<double>() < 0.3);
}

TEST_CASE("composite emulation refuses scale rule mse instead of computing another rule", "[torch][composite]") {
  const at::Tensor x = activation_like(32, 64, 19);
  for (QuantFormat f : {QuantFormat::kMXFP4, QuantFormat::kNVFP4}) {
    const QuantSpec mse{f, ScaleRule::kMse};
    try {
      composite_fake_quantize(x, Axis::kRows, mse, {});
      FAIL("composite_fake_quantize accepted scale rule mse");
    } catch (const std::invalid_argument& e) {
      CHECK(std::string(e.what()) == "composite_fake_quantize: scale rule mse is not emulated (use fake_quantize)");
    }
  }
}

TEST_CASE("composite emulation applies the SR pre-scale: exactly, for fp32 and bf16", "[torch][composite]") {
  const at::Tensor x = activation_like(32, 64, 20);
  for (QuantFormat f : {QuantFormat::kFP32, QuantFormat::kBF16}) {
    QuantSpec spec{f, ScaleRule::kFloor, Rounding::kStochastic};
    spec.sr_prescale = 0.75f;
    CHECK(same_bits(composite_fake_quantize(x, Axis::kRows, spec, {}), fake_quantize(x, Axis::kRows, spec, {})));
  }
  // MXFP4: stochastic noise differs, but both hold Q(0.75 x) on the scales of x.
  QuantSpec spec{QuantFormat::kMXFP4, ScaleRule::kFloor, Rounding::kStochastic};
  spec.sr_prescale = 0.75f;
  const at::Tensor a = composite_fake_quantize(x, Axis::kRows, spec, {});
  const at::Tensor b = fake_quantize(x, Axis::kRows, spec, {});
  const at::Tensor target = x * 0.75;
  CHECK(((a - target).norm() / target.norm()).item<double>() < 0.3);
  CHECK(((b - target).norm() / target.norm()).item<double>() < 0.3);
}
