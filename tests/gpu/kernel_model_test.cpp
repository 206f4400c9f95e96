// The fused kernel's per-thread pipeline, run on the host (kernel_model.h), against the CPU
// reference: every output bit for bit, over every mode, both axes, tile-multiple and ragged
// shapes, finite and non-finite inputs. Runs in CI without a GPU.
#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "catch.h"
#include "kernel_model.h"
#include "reference.h"
#include "segment_quant.h"
#include "test_inputs.h"

using namespace mxablate::kernels;
using namespace mxablate::test;

namespace {

struct Shape {
  int64_t rows, cols;
};

void check_against_reference(const std::vector<float>& x, Shape shape, Axis axis, const QuantSpec& spec,
                             const RngKey& key) {
  const bool want_fp8 = spec.format == QuantFormat::kMXFP4 &&
                        (axis == Axis::kRows ? shape.cols : shape.rows) % 128 == 0;
  const Expected want = reference_quantize(x.data(), shape.rows, shape.cols, axis, spec, key, want_fp8);
  const ModelOutput got = model_quantize(x.data(), shape.rows, shape.cols, axis, spec, key, want_fp8);
  INFO(describe(spec, axis, shape.rows, shape.cols));
  CHECK(first_difference(got.dequant, want.dequant) == -1);
  CHECK(first_difference(got.dequant_bf16, want.dequant_bf16) == -1);
  CHECK(first_difference(got.packed, want.packed) == -1);
  CHECK(first_difference(got.scales, want.scales) == -1);
  CHECK(std::memcmp(&got.tensor_scale, &want.tensor_scale, sizeof(float)) == 0);
  std::string why;
  const bool telemetry_same = telemetry_matches(got.telemetry, want.telemetry, &why);
  INFO(why);
  CHECK(telemetry_same);
  if (want_fp8) {
    CHECK(first_difference(got.fp8_codes, want.fp8_codes) == -1);
    CHECK(first_difference(got.fp8_scales, want.fp8_scales) == -1);
    CHECK(got.fp8_inexact_chunks == want.fp8_inexact_chunks);
  }
}

}  // namespace

TEST_CASE("the kernel pipeline reproduces the CPU reference for every mode", "[gpu-model]") {
  const RngKey key{0x1234567890ABCDEFull, 17, 5, GemmKind::kWgrad, Operand::kA};
  // A tile multiple and a ragged shape (partial tiles along both axes).
  const std::vector<Shape> shapes{{128, 256}, {160, 96}, {64, 48}, {32, 100}};
  for (Shape shape : shapes) {
    for (Specials specials : {Specials::kFiniteOnly, Specials::kAll}) {
      const std::vector<float> x = test_matrix(shape.rows, shape.cols, 7, specials);
      for (const QuantSpec& spec : specs_to_sweep()) {
        for (Axis axis : {Axis::kRows, Axis::kCols}) {
          if (!check_shape(spec, shape.rows, shape.cols, axis).empty()) continue;
          check_against_reference(x, shape, axis, spec, key);
        }
      }
    }
  }
}

TEST_CASE("one Philox evaluation gives the stochastic-rounding numbers of four elements", "[gpu-model]") {
  const RngKey key{42, 3, 9, GemmKind::kDgrad, Operand::kB};
  for (uint64_t group : {0ull, 1ull, 12345ull, (1ull << 33) + 7}) {
    float u[4];
    gpu::detail::sr_uniforms4(key, group, u);
    for (int k = 0; k < 4; ++k) {
      CHECK(u[k] == sr_uniform(key, 4 * group + k));
      CHECK(gpu::detail::sr_uniform_at(key, 4 * group + k) == sr_uniform(key, 4 * group + k));
    }
  }
}

TEST_CASE("the E4M3 re-expression of MXFP4 is exact within 14 binades and counts the rest", "[gpu-model]") {
  // One line of two chunks. Chunk 0: blocks at exponents 0, -14, -3, 0 (exact). Chunk 1: a block
  // 15 binades below the largest holding a 0.5 (inexact), and its dequantized values still match
  // where representable.
  const int64_t length = 256;
  std::vector<uint8_t> packed(length / 2, 0), scales(length / 32, 0);
  const uint8_t e[8] = {127, 113, 124, 127, 130, 115, 120, 125};
  for (int b = 0; b < 8; ++b) scales[b] = e[b];
  for (int64_t j = 0; j < length; ++j) {
    const uint8_t code = static_cast<uint8_t>((j * 5 + 1) % 16);  // every code, both signs
    packed[j / 2] |= static_cast<uint8_t>(j % 2 == 0 ? code : code << 4);
  }
  std::vector<uint8_t> codes(length);
  std::vector<float> chunk_scales(2);
  const int64_t inexact = mx_to_fp8_reference(packed.data(), scales.data(), 1, length, codes.data(),
                                              chunk_scales.data());
  CHECK(inexact == 1);
  CHECK(chunk_scales[0] == std::ldexp(1.0f, 0 - 6));
  CHECK(chunk_scales[1] == std::ldexp(1.0f, 3 - 6));
  for (int64_t j = 0; j < 128; ++j) {
    const uint32_t e2m1 = (packed[j / 2] >> (4 * (j % 2))) & 0xF;
    CHECK(decode_code(codes[j], kE4M3) * chunk_scales[0] == mx_dequant(e2m1, scales[j / 32]));
  }
  // A NaN block makes the whole chunk NaN.
  scales[1] = kE8M0NaN;
  mx_to_fp8_reference(packed.data(), scales.data(), 1, length, codes.data(), chunk_scales.data());
  CHECK(std::isnan(chunk_scales[0]));
  CHECK(codes[5] == kE4M3NaN);
}

// MXFP4 bytes with every E2M1 code in each block (both signs), for `blocks` blocks of one line.
static std::vector<uint8_t> every_code_packed(int64_t length) {
  std::vector<uint8_t> packed(length / 2, 0);
  for (int64_t j = 0; j < length; ++j) {
    const uint8_t code = static_cast<uint8_t>((j * 5 + 1) % 16);
    packed[j / 2] |= static_cast<uint8_t>(j % 2 == 0 ? code : code << 4);
  }
  return packed;
}

TEST_CASE("MXFP4 as E4M3 at one scale per line: a 128-element line is the 1x128 re-expression's chunk", "[gpu-model]") {
  // The same codes, the same scale, the same verdict, on both sides of the 14-binade window.
  const std::vector<uint8_t> packed = every_code_packed(128);
  for (const std::array<uint8_t, 4>& e : {std::array<uint8_t, 4>{127, 113, 124, 127},    // exact
                                          std::array<uint8_t, 4>{130, 115, 120, 125}}) {  // 15 binades
    std::vector<uint8_t> chunk_codes(128), line_codes(128);
    float chunk_scale = 0, line_scale = 0;
    const int64_t inexact_chunks =
        mx_to_fp8_reference(packed.data(), e.data(), 1, 128, chunk_codes.data(), &chunk_scale);
    const Fp8LineStatus st =
        mx_to_fp8_rowwise_reference(packed.data(), e.data(), 1, 128, line_codes.data(), &line_scale);
    CHECK(line_codes == chunk_codes);
    CHECK(line_scale == chunk_scale);
    CHECK(st.max_scale_code == *std::max_element(e.begin(), e.end()));
    CHECK(st.min_line_code == st.max_scale_code);
    CHECK(st.exact() == (inexact_chunks == 0));
    CHECK(st.inexact_blocks == (inexact_chunks == 0 ? 0u : 1u));
  }
}

TEST_CASE("MXFP4 as E4M3 at one scale per line: each line has its own window, above a floor", "[gpu-model]") {
  // Five lines of two blocks, every E2M1 code in each block.
  const int64_t lines = 5, length = 64;
  const std::vector<uint8_t> line = every_code_packed(length);
  std::vector<uint8_t> packed;
  for (int64_t l = 0; l < lines; ++l) packed.insert(packed.end(), line.begin(), line.end());
  std::vector<uint8_t> codes(lines * length);
  std::vector<float> scales_out(lines);
  const auto values_match = [&](const std::vector<uint8_t>& scales) {
    for (int64_t i = 0; i < lines * length; ++i) {
      const uint32_t e2m1 = (packed[i / 2] >> (4 * (i % 2))) & 0xF;
      if (decode_code(codes[i], kE4M3) * scales_out[i / length] != mx_dequant(e2m1, scales[i / 32])) return false;
    }
    return true;
  };
  SECTION("lines 20 and 28 binades below the largest keep their own scale: every value exact") {
    // line 0: the tensor's largest (127); line 1: 107/100; line 2: 99/99; line 3: all zero (code
    // 0: raised to the floor 127 - 28 = 99); line 4: 113/113.
    const std::vector<uint8_t> scales = {127, 120, 107, 100, 99, 99, 0, 0, 113, 113};
    for (int64_t i = 3 * length / 2; i < 4 * length / 2; ++i) packed[i] = 0;  // (each SECTION starts afresh)
    const Fp8LineStatus st = mx_to_fp8_rowwise_reference(packed.data(), scales.data(), lines, length, codes.data(),
                                                         scales_out.data());
    CHECK(st.exact());
    CHECK(st.max_scale_code == 127);
    CHECK(st.min_line_code == 99);
    CHECK(scales_out[0] == std::ldexp(1.0f, 127 - 133));
    CHECK(scales_out[1] == std::ldexp(1.0f, 107 - 133));
    CHECK(scales_out[3] == std::ldexp(1.0f, 99 - 133));  // the floor, for a line of zeros
    CHECK(values_match(scales));
  }
  SECTION("a block 15 binades below its own line's largest is counted, once") {
    const std::vector<uint8_t> scales = {127, 112, 120, 120, 110, 110, 100, 100, 113, 113};
    std::vector<uint8_t> marks(lines, 9);
    const Fp8LineStatus st = mx_to_fp8_rowwise_reference(packed.data(), scales.data(), lines, length, codes.data(),
                                                         scales_out.data(), marks.data());
    CHECK_FALSE(st.exact());
    CHECK(st.inexact_blocks == 1);
    CHECK(marks == std::vector<uint8_t>{1, 0, 0, 0, 0});  // the line, and only it
  }
  SECTION("a line below the floor is held 14 binades under it, and no further") {
    // Line 2 at 85 (42 binades under 127): the floor 99 puts it at shift -8, still exact; line 3
    // at 84 (shift -9): its 0.5 and 1.5 are not E4M3 values.
    const std::vector<uint8_t> scales = {127, 127, 120, 120, 85, 85, 84, 84, 113, 113};
    const Fp8LineStatus st = mx_to_fp8_rowwise_reference(packed.data(), scales.data(), lines, length, codes.data(),
                                                         scales_out.data());
    CHECK_FALSE(st.exact());
    CHECK(st.inexact_blocks == 2);
    CHECK(scales_out[2] == std::ldexp(1.0f, 99 - 133));
  }
  SECTION("a NaN block makes the tensor NaN: codes, scales and status") {
    const std::vector<uint8_t> scales = {127, kE8M0NaN, 120, 120, 110, 110, 100, 100, 113, 113};
    std::vector<uint8_t> marks(lines, 0);
    const Fp8LineStatus st = mx_to_fp8_rowwise_reference(packed.data(), scales.data(), lines, length, codes.data(),
                                                         scales_out.data(), marks.data());
    CHECK_FALSE(st.exact());
    CHECK(marks == std::vector<uint8_t>(lines, 1));  // every line: the whole product is NaN's
    CHECK(std::all_of(scales_out.begin(), scales_out.end(), [](float v) { return std::isnan(v); }));
    CHECK(std::all_of(codes.begin(), codes.end(), [](uint8_t c) { return c == kE4M3NaN; }));
  }
}

TEST_CASE("mxfp4-as-fp8 keeps the FP8 GEMM's scaling only where every scale product is a normal float", "[gpu-model]") {
  // A status whose line scales span 2^lo .. 2^hi (line code = exponent + 133).
  const auto st = [](int lo, int hi) {
    Fp8LineStatus s;
    s.min_line_code = static_cast<uint32_t>(lo + 133);
    s.max_scale_code = static_cast<uint32_t>(hi + 133);
    return s;
  };
  CHECK(fp8_line_scales_normal(st(-12, -10), st(-25, -20), 0.0));
  CHECK(fp8_line_scales_normal(st(-60, -50), st(-66, -60), 0.0));        // 2^-126: the smallest normal
  CHECK_FALSE(fp8_line_scales_normal(st(-60, -50), st(-67, -60), 0.0));  // a subnormal product
  CHECK_FALSE(fp8_line_scales_normal(st(-130, 0), st(0, 60), 0.0));      // a subnormal line scale
  CHECK(fp8_line_scales_normal(st(40, 60), st(50, 67), 0.0));            // 2^127: the largest power
  CHECK_FALSE(fp8_line_scales_normal(st(40, 60), st(50, 68), 0.0));      // 2^128 is no float
  // An SR fold of 16/9 (2^0.83) counts.
  const double fold = std::log2(16.0 / 9.0);
  CHECK(fp8_line_scales_normal(st(-60, 0), st(-66, 0), fold));
  CHECK_FALSE(fp8_line_scales_normal(st(-61, 0), st(-66, 0), fold));
  CHECK(fp8_line_scales_normal(st(0, 60), st(0, 67), fold));
  CHECK_FALSE(fp8_line_scales_normal(st(0, 61), st(0, 67), fold));
  Fp8LineStatus nan = st(0, 0);
  nan.max_scale_code = kE8M0NaN;
  CHECK_FALSE(fp8_line_scales_normal(nan, st(0, 0), 0.0));
  CHECK_FALSE(fp8_line_scales_normal(st(0, 0), nan, 0.0));
}

TEST_CASE("the mxfp4-as-fp8 fix-up recomputes exactly the tiles of marked lines, in order, with the fold", "[gpu-model]") {
  // a: 130 x 64 (three tile rows, the last of two lines), b: 70 x 64 (two tile columns).
  const int64_t m = 130, n = 70, k = 64;
  std::vector<uint8_t> a_packed(m * k / 2), b_packed(n * k / 2), a_scales(m * k / 32), b_scales(n * k / 32);
  uint32_t state = 12345;
  const auto next = [&state] { return state = state * 1664525u + 1013904223u; };
  for (uint8_t& p : a_packed) p = static_cast<uint8_t>(next() >> 24);
  for (uint8_t& p : b_packed) p = static_cast<uint8_t>(next() >> 24);
  for (uint8_t& s : a_scales) s = static_cast<uint8_t>(120 + (next() >> 29));
  for (uint8_t& s : b_scales) s = static_cast<uint8_t>(124 + (next() >> 30));
  std::vector<uint8_t> a_marks(m, 0), b_marks(n, 0);
  a_marks[129] = 1;  // the last tile row
  b_marks[3] = 1;    // the first tile column
  const Fp8LineStatus status = [] {
    Fp8LineStatus s;
    s.max_scale_code = 127;
    s.min_line_code = 120;
    return s;
  }();
  const uint16_t untouched = 0x7E57;
  const float fold = 16.0f / 9.0f;
  std::vector<uint16_t> c(m * n, untouched);
  uint64_t tiles[2] = {0, 0};
  mx_rowwise_fixup_reference(a_packed.data(), a_scales.data(), a_marks.data(), status, b_packed.data(),
                             b_scales.data(), b_marks.data(), status, m, n, k, fold, std::log2(double{fold}), c.data(),
                             n, tiles);
  CHECK(tiles[0] == 2);  // tile rows 0 and 1 of tile column 1
  CHECK(tiles[1] == 4);  // tile column 0 (3 tiles) and tile (2, 1)
  const auto value = [k](const std::vector<uint8_t>& packed, const std::vector<uint8_t>& scales, int64_t line, int64_t i) {
    return mx_dequant((packed[(line * k + i) / 2] >> (4 * (i % 2))) & 0xF, scales[(line * k + i) / 32]);
  };
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const bool redo = j < 64 || i >= 128;
      if (!redo) {
        CHECK(c[i * n + j] == untouched);
        continue;
      }
      float acc = 0.0f;
      for (int64_t x = 0; x < k; ++x) acc += value(a_packed, a_scales, i, x) * value(b_packed, b_scales, j, x);
      REQUIRE(c[i * n + j] == float_to_bf16_bits(acc * fold));
    }
  // Scale products that are not all normal: every tile.
  std::fill(c.begin(), c.end(), untouched);
  std::fill(a_marks.begin(), a_marks.end(), 0);
  std::fill(b_marks.begin(), b_marks.end(), 0);
  Fp8LineStatus tiny = status;
  tiny.min_line_code = 2;  // 2^-131: a subnormal scale
  uint64_t all[2] = {0, 0};
  mx_rowwise_fixup_reference(a_packed.data(), a_scales.data(), a_marks.data(), tiny, b_packed.data(), b_scales.data(),
                             b_marks.data(), status, m, n, k, 1.0f, 0.0, c.data(), n, all);
  CHECK(all[0] == 0);
  CHECK(all[1] == 6);
  CHECK(std::none_of(c.begin(), c.end(), [&](uint16_t v) { return v == untouched; }));
  // An MXFP4 value beyond BF16's range is the emulation's operand: BF16's largest finite value.
  CHECK(mx_gemm_operand_value(0x7, 254) == kBF16MaxFinite);  // 6 * 2^127 overflows float32
  CHECK(mx_gemm_operand_value(0xF, 254) == -kBF16MaxFinite);
  CHECK(mx_gemm_operand_value(0x2, 127) == 1.0f);
}
