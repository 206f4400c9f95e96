// Philox-4x32-10 against Random123's published known-answer vectors.
#include "catch.h"
#include "mxablate/kernels/philox.h"

using namespace mxablate::kernels;

namespace {
void check_kat(PhiloxBlock ctr, uint32_t k0, uint32_t k1, PhiloxBlock want) {
  const PhiloxBlock got = philox4x32_10(ctr, k0, k1);
  for (int i = 0; i < 4; ++i) CHECK(got.v[i] == want.v[i]);
}
}  // namespace

TEST_CASE("Philox4x32-10 matches the Random123 known answers") {
  check_kat({{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}});
  check_kat({{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}}, 0xffffffff, 0xffffffff,
            {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}});
  check_kat({{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, 0xa4093822, 0x299f31d0,
            {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}});
}

TEST_CASE("uniform24 covers zero up to one minus 2^-24, in steps of 2^-24") {
  CHECK(uniform24(0) == 0.0f);
  CHECK(uniform24(0xFFFFFFFFu) == 1.0f - 1.0f / 16777216.0f);
  CHECK(uniform24(0x80000000u) == 0.5f);
}

TEST_CASE("the SR stream depends on every key field and on the element index") {
  RngKey base{42, 7, 3, GemmKind::kWgrad, Operand::kA};
  const float u = sr_uniform(base, 1000);
  CHECK(sr_uniform(base, 1000) == u);
  RngKey k = base;
  k.seed = 43;
  CHECK(sr_uniform(k, 1000) != u);
  k = base;
  k.step = 8;
  CHECK(sr_uniform(k, 1000) != u);
  k = base;
  k.layer = 4;
  CHECK(sr_uniform(k, 1000) != u);
  k = base;
  k.gemm = GemmKind::kDgrad;
  CHECK(sr_uniform(k, 1000) != u);
  k = base;
  k.operand = Operand::kB;
  CHECK(sr_uniform(k, 1000) != u);
  CHECK(sr_uniform(base, 1001) != u);
  CHECK(sr_uniform(base, 1000 + (1ull << 34)) != u);  // indices past 2^32 stay distinct
}
