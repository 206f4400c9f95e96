// 2-D blocks (docs/design.md §3): one scale per 32 x 32 (MXFP4) or 16 x 16 (NVFP4) tile, so W
// quantized along rows and W quantized down columns hold the same values. Hand-derived scales
// and values, the per-line layout of both axes, W/Wᵀ equality bit for bit, and shape errors.
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "catch.h"
#include "mxablate/kernels/quantize.h"
#include "quant_test_util.h"

using namespace mxablate::kernels;
using mxablate::test::activation_like;
using mxablate::test::Quantized;
using mxablate::test::run_quantize;
using mxablate::test::same_bits;

namespace {

QuantSpec spec_2d(QuantFormat format, ScaleRule rule = ScaleRule::kFloor,
                  Rounding rounding = Rounding::kNearest) {
  QuantSpec s;
  s.format = format;
  s.scale_rule = rule;
  s.rounding = rounding;
  s.blocks = BlockShape::k2D;
  return s;
}

// A 32 x 64 tensor of two MXFP4 tiles: ones everywhere, tile 0 (columns 0-31) holding 7 at
// (17, 5), tile 1 (columns 32-63) holding -96 at (3, 40).
std::vector<float> two_tiles() {
  std::vector<float> x(32 * 64, 1.0f);
  x[17 * 64 + 5] = 7.0f;
  x[3 * 64 + 40] = -96.0f;
  return x;
}

std::string shape_error(const QuantSpec& spec, int64_t rows, int64_t cols, Axis axis) {
  std::vector<float> x(static_cast<size_t>(rows * cols), 1.0f);
  std::vector<float> out(x.size());
  QuantOutputs o;
  o.dequant = out.data();
  try {
    quantize(x.data(), rows, cols, axis, spec, {}, o);
  } catch (const std::invalid_argument& e) {
    CHECK(e.what() == check_shape(spec, rows, cols, axis));
    return e.what();
  }
  return {};
}

// Quantizes x (rows x cols) along rows and down columns and checks that both give the same
// values, that their packed outputs (each in its axis' per-line layout) decode to them, and that
// the scale bytes agree: equal over the lines of a tile, the same tile scale on both axes.
void check_w_and_wt(const std::vector<float>& x, int64_t rows, int64_t cols, const QuantSpec& spec,
                    const RngKey& key) {
  const Quantized along_rows = run_quantize(x, rows, cols, Axis::kRows, spec, key);
  const Quantized down_cols = run_quantize(x, rows, cols, Axis::kCols, spec, key);
  CHECK(same_bits(along_rows.dequant, down_cols.dequant));
  CHECK(along_rows.dequant_bf16 == down_cols.dequant_bf16);
  CHECK(std::memcmp(&along_rows.tensor_scale, &down_cols.tensor_scale, sizeof(float)) == 0);
  std::vector<float> from_rows(x.size()), from_cols(x.size());
  dequantize_packed(along_rows.packed.data(), along_rows.scales.data(), along_rows.tensor_scale, rows, cols,
                    Axis::kRows, spec.format, from_rows.data());
  dequantize_packed(down_cols.packed.data(), down_cols.scales.data(), down_cols.tensor_scale, rows, cols,
                    Axis::kCols, spec.format, from_cols.data());
  CHECK(same_bits(from_rows, along_rows.dequant));
  CHECK(same_bits(from_cols, down_cols.dequant));
  const int64_t t = block_size(spec.format);
  int64_t disagreements = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; c += t) {
      const uint8_t row_scale = along_rows.scales[static_cast<size_t>(r * (cols / t) + c / t)];
      const uint8_t tile_first_row = along_rows.scales[static_cast<size_t>((r / t * t) * (cols / t) + c / t)];
      const uint8_t col_scale = down_cols.scales[static_cast<size_t>(c * (rows / t) + r / t)];
      disagreements += row_scale != tile_first_row || row_scale != col_scale;
    }
  }
  CHECK(disagreements == 0);
}

}  // namespace

TEST_CASE("2-D MXFP4: each 32 x 32 tile's amax gives the scale of every line crossing it") {
  const std::vector<float> x = two_tiles();
  // Tile amax 7 and 96. floor: e = floor(log2 amax) - 2 = 0 and 4; ceil: the smallest e with
  // amax <= 6 * 2^e = 1 and 4; even: 7 rounds to 8 at one mantissa bit, so 1; 96 = 1.5 * 2^6
  // stays, so 4. E8M0 code = e + 127.
  struct Case {
    ScaleRule rule;
    uint8_t tile0, tile1;
  };
  for (const Case c : {Case{ScaleRule::kFloor, 127, 131}, Case{ScaleRule::kCeil, 128, 131},
                       Case{ScaleRule::kEven, 128, 131}}) {
    INFO("rule " << to_string(c.rule));
    const Quantized rows = run_quantize(x, 32, 64, Axis::kRows, spec_2d(QuantFormat::kMXFP4, c.rule));
    const Quantized cols = run_quantize(x, 32, 64, Axis::kCols, spec_2d(QuantFormat::kMXFP4, c.rule));
    // Along rows: 32 lines (rows) of two blocks, (tile 0, tile 1) in every line.
    REQUIRE(rows.scales.size() == 64);
    for (int r = 0; r < 32; ++r) {
      CHECK(rows.scales[r * 2 + 0] == c.tile0);
      CHECK(rows.scales[r * 2 + 1] == c.tile1);
    }
    // Down columns: 64 lines (columns) of one block; columns 0-31 cross tile 0, 32-63 tile 1.
    REQUIRE(cols.scales.size() == 64);
    for (int col = 0; col < 64; ++col) CHECK(cols.scales[col] == (col < 32 ? c.tile0 : c.tile1));
    CHECK(same_bits(rows.dequant, cols.dequant));

    // Values: the ones of tile 1 are 1/16 of a 2^4 scale and flush to zero, although their own
    // row's block (max 1) would have kept them; the ones of tile 0 are exact.
    CHECK(rows.dequant[0 * 64 + 0] == 1.0f);
    CHECK(rows.dequant[0 * 64 + 33] == 0.0f);
    CHECK(rows.dequant[3 * 64 + 40] == -96.0f);  // 6 * 2^4
    // 7 saturates to 6 * 2^0 under floor; with 2^1 it is 3.5, a tie between 3 and 4 that goes
    // to the even code (4, code 6), so 8.
    CHECK(rows.dequant[17 * 64 + 5] == (c.rule == ScaleRule::kFloor ? 6.0f : 8.0f));
    CHECK(rows.telemetry.saturated == (c.rule == ScaleRule::kFloor ? 1u : 0u));
    CHECK(rows.telemetry.flushed == 32 * 32 - 1);  // every 1 of tile 1
  }
  // 1-D blocks on the same tensor: each row's own amax, so the two axes disagree.
  QuantSpec one_d = spec_2d(QuantFormat::kMXFP4);
  one_d.blocks = BlockShape::k1D;
  const Quantized rows_1d = run_quantize(x, 32, 64, Axis::kRows, one_d);
  CHECK(rows_1d.scales[0 * 2 + 1] == 125);  // row 0, columns 32-63: amax 1, e = -2
  CHECK(rows_1d.dequant[0 * 64 + 33] == 1.0f);
  CHECK_FALSE(same_bits(rows_1d.dequant, run_quantize(x, 32, 64, Axis::kCols, one_d).dequant));
}

TEST_CASE("2-D NVFP4: a 16 x 16 tile's amax gives its E4M3 scale, the global scale stays per tensor") {
  // 32 x 32: four tiles. Tensor amax 2688 (in tile (0, 0)) makes the global scale exactly 1.
  std::vector<float> x(32 * 32, 0.5f);
  x[2 * 32 + 3] = 2688.0f;   // tile (0, 0): scale 2688 / 6 = 448
  x[20 * 32 + 7] = 5.0f;     // tile (1, 0): 5 / 6 -> E4M3 0.8125
  x[9 * 32 + 30] = 12.0f;    // tile (0, 1): 12 / 6 = 2
  // tile (1, 1): amax 0.5 -> 0.5 / 6 = 0.0833, between the E4M3 values 0.078125 and 0.0859375
  // (steps of 2^-7 there): nearest 0.0859375
  for (Axis axis : {Axis::kRows, Axis::kCols}) {
    const Quantized q = run_quantize(x, 32, 32, axis, spec_2d(QuantFormat::kNVFP4));
    CHECK(q.tensor_scale == 1.0f);
    REQUIRE(q.scales.size() == 64);  // 32 lines x 2 blocks
    for (int line = 0; line < 32; ++line) {
      for (int b = 0; b < 2; ++b) {
        // Tile (row band, column band) of block b of this line.
        const int tr = axis == Axis::kRows ? line / 16 : b, tc = axis == Axis::kRows ? b : line / 16;
        const float want = tr == 0 && tc == 0 ? 448.0f : tr == 1 && tc == 0 ? 0.8125f : tr == 0 ? 2.0f : 0.0859375f;
        INFO("axis " << to_string(axis) << " line " << line << " block " << b);
        CHECK(decode_code(q.scales[line * 2 + b], kE4M3) == want);
      }
    }
    // Elements x / (block scale * 1) on the E2M1 grid, times the block scale.
    CHECK(q.dequant[2 * 32 + 3] == 2688.0f);       // 6 * 448
    CHECK(q.dequant[2 * 32 + 4] == 0.0f);          // 0.5 / 448 flushes
    CHECK(q.dequant[9 * 32 + 30] == 12.0f);        // 6 * 2
    CHECK(q.dequant[9 * 32 + 31] == 0.0f);         // 0.25: a tie between 0 and 0.5, to the even code 0
    CHECK(q.dequant[20 * 32 + 7] == 4.875f);       // 5 / 0.8125 = 6.15 saturates: 6 * 0.8125
    CHECK(q.dequant[20 * 32 + 8] == 0.40625f);     // 0.5 / 0.8125 = 0.62 -> 0.5
    CHECK(q.dequant[30 * 32 + 30] == 0.515625f);   // 0.5 / 0.0859375 = 5.8 -> 6
  }
}

TEST_CASE("2-D blocks: a tile holding NaN or Inf gets the NaN scale, an all-zero tile the smallest") {
  for (QuantFormat f : {QuantFormat::kMXFP4, QuantFormat::kNVFP4}) {
    const int t = block_size(f);
    std::vector<float> x = activation_like(2 * t, 2 * t, 3);
    x[1 * 2 * t + 2] = std::numeric_limits<float>::quiet_NaN();  // tile (0, 0)
    x[(t + 1) * 2 * t + t + 3] = 0.0f;                          // tile (1, 1): all zero
    for (int r = t; r < 2 * t; ++r)
      for (int c = t; c < 2 * t; ++c) x[r * 2 * t + c] = 0.0f;
    x[(t + 2) * 2 * t + 1] = -std::numeric_limits<float>::infinity();  // tile (1, 0)
    for (Axis axis : {Axis::kRows, Axis::kCols}) {
      INFO(to_string(f) << " " << to_string(axis));
      const Quantized q = run_quantize(x, 2 * t, 2 * t, axis, spec_2d(f));
      const uint8_t nan_scale = f == QuantFormat::kMXFP4 ? kE8M0NaN : kE4M3NaNCode;
      // NVFP4's global scale comes from the tensor: an Inf makes it NaN and every value NaN.
      for (int r = 0; r < 2 * t; ++r) {
        for (int c = 0; c < 2 * t; ++c) {
          const float v = q.dequant[r * 2 * t + c];
          const bool nan_tile = c < t || f == QuantFormat::kNVFP4;
          if (nan_tile) {
            CHECK(std::isnan(v));
          } else if (r >= t) {
            CHECK(v == 0.0f);
          } else {
            CHECK(std::isfinite(v));
          }
        }
      }
      // Block 0 of a line along rows lies in column band 0 (tiles (0, 0) and (1, 0), both NaN);
      // down columns, lines (columns) below t cross the NaN tiles (0, 0) and (1, 0).
      for (int line = 0; line < 2 * t; ++line) {
        if (axis == Axis::kRows) CHECK(q.scales[line * 2 + 0] == nan_scale);
        if (axis == Axis::kCols && line < t) CHECK((q.scales[line * 2 + 0] == nan_scale && q.scales[line * 2 + 1] == nan_scale));
      }
      if (f == QuantFormat::kMXFP4) {
        // The all-zero tile (1, 1): its lines' block 1 carry E8M0 code 0 (2^-127).
        for (int line = t; line < 2 * t; ++line) CHECK(q.scales[line * 2 + 1] == 0);
        // Non-finite blocks are counted per scale byte: the 2 NaN tiles x t lines.
        CHECK(q.telemetry.nonfinite_blocks == static_cast<uint64_t>(2 * t));
      }
    }
  }
}

TEST_CASE("2-D blocks: W along rows and W down columns give the same values bit for bit") {
  const RngKey key{0xFEEDull, 12, 3, GemmKind::kFprop, Operand::kB};
  std::vector<float> w = activation_like(64, 96, 11);
  w[5 * 96 + 70] = 3.0e38f;                 // a huge value (clamped dequantization under ceil)
  w[40 * 96 + 2] = 1.0e-42f;                // subnormals
  w[41 * 96 + 3] = -1.0e-40f;
  std::vector<float> w_inf = w;
  w_inf[50 * 96 + 90] = std::numeric_limits<float>::infinity();  // one non-finite tile
  for (QuantFormat f : {QuantFormat::kMXFP4, QuantFormat::kNVFP4}) {
    for (ScaleRule rule : {ScaleRule::kFloor, ScaleRule::kCeil, ScaleRule::kEven}) {
      if (f == QuantFormat::kNVFP4 && rule != ScaleRule::kFloor) continue;  // E8M0 rules only
      for (Rounding rounding : {Rounding::kNearest, Rounding::kStochastic}) {
        for (float prescale : {1.0f, 0.75f}) {  // the SR pre-scale (ignored under round-to-nearest)
          QuantSpec spec = spec_2d(f, rule, rounding);
          spec.sr_prescale = prescale;
          for (const std::vector<float>* x : {&w, &w_inf}) {
            INFO(to_string(f) << " " << to_string(rule) << " " << to_string(rounding) << " prescale " << prescale
                              << (x == &w ? "" : " with Inf"));
            check_w_and_wt(*x, 64, 96, spec, key);
          }
        }
      }
    }
  }
}

TEST_CASE("2-D blocks need both dimensions to be multiples of the tile, said in one sentence") {
  const QuantSpec mx = spec_2d(QuantFormat::kMXFP4);
  // 40 rows suit 1-D blocks along rows, not 32 x 32 tiles.
  CHECK(check_shape({QuantFormat::kMXFP4}, 40, 64, Axis::kRows).empty());
  CHECK(shape_error(mx, 40, 64, Axis::kRows) ==
        "the number of rows (40) is not a multiple of the mxfp4 2-D block size 32 (2-D blocks tile both dimensions)");
  CHECK(shape_error(mx, 64, 48, Axis::kCols) ==
        "the number of columns (48) is not a multiple of the mxfp4 2-D block size 32 (2-D blocks tile both dimensions)");
  CHECK(shape_error(spec_2d(QuantFormat::kNVFP4), 24, 32, Axis::kCols) ==
        "the number of rows (24) is not a multiple of the nvfp4 2-D block size 16 (2-D blocks tile both dimensions)");
  CHECK(shape_error(spec_2d(QuantFormat::kNVFP4), 48, 32, Axis::kCols).empty());
  // The mse rule chooses per 1-D block: not combined with 2-D blocks (yet).
  CHECK(shape_error(spec_2d(QuantFormat::kMXFP4, ScaleRule::kMse), 64, 64, Axis::kRows) ==
        "the mse scale rule is not available with 2-D blocks (it chooses a scale per 1-D block); use floor, ceil or even");
  // Per-tensor and unscaled formats ignore the block shape.
  for (QuantFormat f : {QuantFormat::kFP8E4M3, QuantFormat::kFP8E5M2, QuantFormat::kBF16, QuantFormat::kFP32}) {
    const QuantSpec s = spec_2d(f);
    CHECK(block_2d_tile(s) == 0);
    CHECK(shape_error(s, 40, 24, Axis::kRows).empty());
    const std::vector<float> x = activation_like(40, 24, 5);
    QuantSpec one_d = s;
    one_d.blocks = BlockShape::k1D;
    CHECK(same_bits(run_quantize(x, 40, 24, Axis::kCols, s).dequant, run_quantize(x, 40, 24, Axis::kCols, one_d).dequant));
  }
}

TEST_CASE("2-D blocks are not combined with a Hadamard rotation, said in one sentence") {
  QuantSpec spec = spec_2d(QuantFormat::kMXFP4);
  spec.hadamard = HadamardMode::kDeterministic;
  spec.hadamard_size = 32;
  for (Axis axis : {Axis::kRows, Axis::kCols})
    CHECK(shape_error(spec, 64, 64, axis) ==
          "2-D blocks cannot be combined with a Hadamard rotation (it runs along the quantization axis, so rows "
          "and columns would no longer share values)");
  spec.blocks = BlockShape::k1D;
  CHECK(shape_error(spec, 64, 64, Axis::kCols).empty());
}
