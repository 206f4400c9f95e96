// Element formats: every code decodes to its value, every value encodes back, ties go to even.
#include "catch.h"
#include "mxablate/kernels/minifloat.h"

#include <cmath>
#include <limits>

using namespace mxablate::kernels;

namespace {
float rne(float x, const MinifloatFormat& f) { return decode_code(round_to_code(x, f, -1.0f).code, f); }
}  // namespace

TEST_CASE("every E2M1 code decodes to the OCP value") {
  const float expected[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (uint32_t code = 0; code < 16; ++code) {
    const float v = decode_code(code, kE2M1);
    const float magnitude = expected[code & 7];
    CHECK(std::fabs(v) == magnitude);
    CHECK(std::signbit(v) == (code >= 8));
  }
}

TEST_CASE("every representable E2M1 value encodes back to its code") {
  for (uint32_t code = 0; code < 16; ++code) {
    const float v = decode_code(code, kE2M1);
    const ElementRounding r = round_to_code(v, kE2M1, -1.0f);
    CHECK(r.code == code);
    CHECK_FALSE(r.saturated);
  }
}

TEST_CASE("E2M1 ties round to the even code") {
  // Midpoints between neighbours; the even code (mantissa bit 0) wins.
  CHECK(rne(0.25f, kE2M1) == 0.0f);
  CHECK(rne(0.75f, kE2M1) == 1.0f);
  CHECK(rne(1.25f, kE2M1) == 1.0f);
  CHECK(rne(1.75f, kE2M1) == 2.0f);
  CHECK(rne(2.5f, kE2M1) == 2.0f);
  CHECK(rne(3.5f, kE2M1) == 4.0f);
  CHECK(rne(5.0f, kE2M1) == 4.0f);
  CHECK(rne(-5.0f, kE2M1) == -4.0f);
  // Just off the midpoints, nearest wins.
  CHECK(rne(std::nextafter(0.25f, 1.0f), kE2M1) == 0.5f);
  CHECK(rne(std::nextafter(5.0f, 6.0f), kE2M1) == 6.0f);
  CHECK(rne(std::nextafter(0.75f, 0.0f), kE2M1) == 0.5f);
}

TEST_CASE("E2M1 saturates beyond 6 and keeps the sign of zero") {
  const ElementRounding big = round_to_code(7.9f, kE2M1, -1.0f);
  CHECK(decode_code(big.code, kE2M1) == 6.0f);
  CHECK(big.saturated);
  const ElementRounding six = round_to_code(6.0f, kE2M1, -1.0f);
  CHECK_FALSE(six.saturated);
  CHECK(rne(-1e30f, kE2M1) == -6.0f);
  const float negative_zero = rne(-0.1f, kE2M1);
  CHECK(negative_zero == 0.0f);
  CHECK(std::signbit(negative_zero));
}

TEST_CASE("E4M3 and E5M2: every finite code round-trips, NaN/Inf codes decode as such") {
  for (const MinifloatFormat* f : {&kE4M3, &kE5M2}) {
    int finite = 0;
    for (uint32_t code = 0; code < 256; ++code) {
      const float v = decode_code(code, *f);
      if (!std::isfinite(v)) continue;
      ++finite;
      const ElementRounding r = round_to_code(v, *f, -1.0f);
      // -0 and +0 are distinct codes and both round-trip.
      CHECK(r.code == code);
    }
    // E4M3: 256 codes minus two NaNs; E5M2: minus 2 infinities and 6 NaNs.
    CHECK(finite == (f == &kE4M3 ? 254 : 248));
  }
  CHECK(std::isnan(decode_code(0x7F, kE4M3)));
  CHECK(std::isnan(decode_code(0xFF, kE4M3)));
  CHECK(decode_code(0x7E, kE4M3) == 448.0f);
  CHECK(decode_code(0x01, kE4M3) == std::ldexp(1.0f, -9));  // smallest subnormal
  CHECK(std::isinf(decode_code(0x7C, kE5M2)));
  CHECK(decode_code(0x7B, kE5M2) == 57344.0f);
  CHECK(decode_code(0x01, kE5M2) == std::ldexp(1.0f, -16));
}

TEST_CASE("E4M3 rounding: ties to even, subnormals, saturation at 448") {
  CHECK(rne(1.0625f, kE4M3) == 1.0f);     // halfway between 1 and 1.125: even (1.0)
  CHECK(rne(1.1875f, kE4M3) == 1.25f);    // halfway between 1.125 and 1.25: even (1.25)
  CHECK(rne(std::ldexp(1.5f, -9), kE4M3) == std::ldexp(2.0f, -9));  // subnormal tie → even
  CHECK(rne(std::ldexp(0.5f, -9), kE4M3) == 0.0f);                  // half the smallest → 0
  CHECK(rne(460.0f, kE4M3) == 448.0f);
  CHECK(rne(1e9f, kE4M3) == 448.0f);
  CHECK(rne(61440.0f, kE5M2) == 57344.0f);
}

TEST_CASE("floor_log2 is exact for normals and subnormals") {
  CHECK(floor_log2(1.0f) == 0);
  CHECK(floor_log2(std::nextafter(2.0f, 0.0f)) == 0);
  CHECK(floor_log2(6.0f) == 2);
  CHECK(floor_log2(std::numeric_limits<float>::max()) == 127);
  CHECK(floor_log2(std::numeric_limits<float>::min()) == -126);
  CHECK(floor_log2(std::numeric_limits<float>::denorm_min()) == -149);
  CHECK(floor_log2(std::ldexp(1.75f, -140)) == -140);
}

TEST_CASE("bf16 conversion rounds to nearest even and keeps NaN") {
  CHECK(float_to_bf16_bits(1.0f) == 0x3F80);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: even → 1.
  CHECK(float_to_bf16_bits(1.0f + std::ldexp(1.0f, -8)) == 0x3F80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: even → 1 + 2^-6.
  CHECK(float_to_bf16_bits(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3F82);
  CHECK(std::isnan(bf16_bits_to_float(float_to_bf16_bits(std::nanf("")))));
  CHECK(bf16_bits_to_float(0x7F7F) == kBF16MaxFinite);
}
