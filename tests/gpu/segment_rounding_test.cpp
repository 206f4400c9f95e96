// The fused kernel's shortcuts in element rounding (kernels/gpu/segment_quant.h) against the
// general path they replace, exhaustively where the inputs are few: the kernel takes a shortcut
// only where it gives the same bits, and these tests are where "the same" is checked on every
// input, ties, subnormals and saturation included (the model and GPU tests then check the
// kernel's choice of path on whole tensors).
#include <cmath>
#include <cstdint>
#include <string>

#include "catch.h"
#include "segment_quant.h"

using namespace mxablate::kernels;
using namespace mxablate::kernels::gpu::detail;

namespace {

// The first input of `x` whose fast rounding differs from the general one in value bits,
// code or saturation flag; empty when none does.
std::string mx_rne_difference(const BlockParams& block, float x) {
  const ElementResult fast = round_element<QuantFormat::kMXFP4, false, true>(1.0f, block, x, -1.0f);
  const ElementResult general = round_element<QuantFormat::kMXFP4, false, false>(1.0f, block, x, -1.0f);
  if (float_bits(fast.value) == float_bits(general.value) && fast.code == general.code &&
      fast.saturated == general.saturated)
    return {};
  return "scale code " + std::to_string(block.scale_code) + ", x bits " + std::to_string(float_bits(x)) +
         ": fast " + std::to_string(float_bits(fast.value)) + " code " + std::to_string(fast.code) + ", general " +
         std::to_string(float_bits(general.value)) + " code " + std::to_string(general.code);
}

}  // namespace

TEST_CASE("MXFP4 round-to-nearest in the input's scale equals the general path on every bf16 input", "[gpu-model]") {
  // Every finite bf16 value (both signs, zeros, subnormals, every binade) at every scale the
  // shortcut takes: 229 x 65,536 elements.
  for (int code = kMxScaledMinCode; code <= kMxScaledMaxCode; ++code) {
    const BlockParams block = params_of_scale_code<QuantFormat::kMXFP4>(static_cast<uint8_t>(code), 1.0f);
    REQUIRE(mx_rne_scaled_applies(block.scale_code));
    std::string first;
    for (uint32_t h = 0; h < 0x10000u && first.empty(); ++h) {
      const float x = bf16_bits_to_float(static_cast<uint16_t>(h));
      if (!is_finite_bits(x)) continue;
      first = mx_rne_difference(block, x);
    }
    INFO(first);
    REQUIRE(first.empty());
  }
}

TEST_CASE("MXFP4 round-to-nearest in the input's scale equals the general path on every float32 that rounds", "[gpu-model]") {
  // Float32 inputs (a rotated segment's values): every significand of every binade from 2^(e-3),
  // below which everything rounds to zero, to the largest finite value the scale admits
  // (|y| < 8, and the saturating ones above 6), at the range's ends and inside it. Both signs at
  // the lowest scale, where the products go subnormal; the sign is a bit copy elsewhere.
  for (int code : {int{kMxScaledMinCode}, 3, 127, 200, int{kMxScaledMaxCode}}) {
    const BlockParams block = params_of_scale_code<QuantFormat::kMXFP4>(static_cast<uint8_t>(code), 1.0f);
    const int e = code - kE8M0Bias;
    // [2^(e-3), 2^(e+3)) as bits; from zero when 2^(e-3) is subnormal (the lowest scales).
    const uint32_t lo = e - 3 + 127 >= 1 ? static_cast<uint32_t>(e - 3 + 127) << 23 : 0u;
    const uint32_t hi = static_cast<uint32_t>(e + 3 + 127) << 23;
    std::string first;
    for (uint32_t b = lo; b < hi && first.empty(); ++b) {
      first = mx_rne_difference(block, bits_float(b));
      if (first.empty() && code == kMxScaledMinCode) first = mx_rne_difference(block, bits_float(b | 0x80000000u));
    }
    // Below 2^(e-3): subnormal and tiny inputs, in steps that visit every binade.
    for (uint32_t b = 0; b < lo && first.empty(); b += 0x1001u) first = mx_rne_difference(block, bits_float(b));
    INFO(first);
    REQUIRE(first.empty());
  }
}

TEST_CASE("MXFP4 round-to-nearest in the input's scale: the range's bounds are where the shortcut stops being exact", "[gpu-model]") {
  // Just outside the range the shortcut would go wrong (which is why quantize_segment checks it):
  // at e = 104 the rounding constant of the top binade overflows, at e = -126 a result of
  // 2^(e-1) is subnormal and the constant floor's bits describe no power of two.
  CHECK(!mx_rne_scaled_applies(kMxScaledMinCode - 1));
  CHECK(!mx_rne_scaled_applies(kMxScaledMaxCode + 1));
  CHECK(!mx_rne_scaled_applies(0));       // all-zero block
  CHECK(!mx_rne_scaled_applies(kE8M0NaN));  // non-finite block
  const BlockParams top = params_of_scale_code<QuantFormat::kMXFP4>(kMxScaledMaxCode + 1, 1.0f);
  CHECK(!mx_rne_difference(top, 5.0f * top.scale).empty());
}

TEST_CASE("the floor rule's E8M0 code from the exponent field equals e8m0_scale_code", "[gpu-model]") {
  // Every exponent field (zero and subnormal amax included) at its smallest, a middle and its
  // largest significand, and every non-negative bf16 amax; a non-finite block gets the NaN code.
  const auto check = [](float amax) {
    const uint8_t general = e8m0_scale_code(amax, false, ScaleRule::kFloor, kE2M1Emax);
    INFO("amax bits " << float_bits(amax));
    REQUIRE(mx_floor_scale_code(Amax{amax, false}) == general);
  };
  for (uint32_t field = 0; field < 255u; ++field)
    for (uint32_t mantissa : {0u, 1u, 0x400000u, 0x7FFFFFu}) check(bits_float(field << 23 | mantissa));
  for (uint32_t h = 0; h < 0x7F80u; ++h) check(bf16_bits_to_float(static_cast<uint16_t>(h)));
  CHECK(mx_floor_scale_code(Amax{0.0f, true}) == kE8M0NaN);
  CHECK(mx_amax_scale_code(Amax{0.0f, true}, ScaleRule::kFloor) == kE8M0NaN);
  // The other amax rules still take the general function.
  for (ScaleRule rule : {ScaleRule::kCeil, ScaleRule::kEven})
    for (float amax : {0.0f, 1e-40f, 5.9f, 7.0f, 1e30f})
      CHECK(mx_amax_scale_code(Amax{amax, false}, rule) == e8m0_scale_code(amax, false, rule, kE2M1Emax));
}
