// The CPU reference quantizer. Deliberately plain: gather a line, rotate it, find each block's
// scale, round each element, scatter the results. Speed comes from running lines in parallel,
// not from cleverness, because this file is the oracle the GPU kernels are checked against.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "mxablate/kernels/block_scaling.h"
#include "mxablate/kernels/quantize.h"
#include "parallel.h"
#include "tensor_lines.h"

namespace mxablate::kernels {
namespace {

using detail::TensorLines;

// Per-tensor statistics of the (rotated) input, needed before any element can be rounded by
// the formats with a tensor-wide scale.
struct TensorAmax {
  float amax = 0.0f;
  bool nonfinite = false;
};

TensorAmax tensor_amax(const std::vector<float>& rotated) {
  TensorAmax t;
  for (float v : rotated) {
    if (!is_finite_bits(v)) {
      t.nonfinite = true;
    } else {
      t.amax = std::max(t.amax, std::fabs(v));
    }
  }
  return t;
}

// Everything one element's rounding needs besides its value.
struct BlockParams {
  uint8_t scale_code = 0;  // E8M0 (MXFP4) or E4M3 (NVFP4)
  bool nonfinite = false;  // the block (or tensor) holds a NaN/Inf: outputs are NaN
  float inverse = 1.0f;    // MXFP4: 2^-e
  float divisor = 1.0f;    // NVFP4: block_scale * global; FP8: tensor scale
};

struct ElementResult {
  uint32_t code = 0;
  float value = 0.0f;  // dequantized, before the float32/bf16 range clamp
  bool saturated = false;
};

ElementResult round_element(const QuantSpec& spec, float global, const BlockParams& block,
                            float x, float u) {
  ElementResult r;
  switch (spec.format) {
    // A NaN leaves as the canonical quiet NaN: a rotation can make one (inf - inf), and the bits
    // of a NaN made by arithmetic differ between CPUs and GPUs, which would break bit-exactness.
    case QuantFormat::kFP32:
      r.value = x == x ? x : quiet_nan();
      return r;
    case QuantFormat::kBF16:
      r.value = x == x ? bf16_bits_to_float(float_to_bf16_bits(x)) : quiet_nan();
      return r;
    case QuantFormat::kMXFP4: {
      if (block.nonfinite) {
        r.value = quiet_nan();
        return r;
      }
      const ElementRounding e = round_to_code(x * block.inverse, kE2M1, u);
      r.code = e.code;
      r.saturated = e.saturated;
      r.value = mx_dequant(e.code, block.scale_code);
      return r;
    }
    case QuantFormat::kNVFP4: {
      if (block.nonfinite) {
        r.value = quiet_nan();
        return r;
      }
      if (block.divisor == 0.0f) {  // block scale rounded to zero: the whole block flushes
        r.code = (float_bits(x) >> 31) << 3;
        r.value = nvfp4_dequant(r.code, block.scale_code, global);
        return r;
      }
      const ElementRounding e = round_to_code(x / block.divisor, kE2M1, u);
      r.code = e.code;
      r.saturated = e.saturated;
      r.value = nvfp4_dequant(e.code, block.scale_code, global);
      return r;
    }
    case QuantFormat::kFP8E4M3:
    case QuantFormat::kFP8E5M2: {
      const MinifloatFormat f = *element_format(spec.format);
      if (block.nonfinite) {
        r.code = f.nan_code;
        r.value = quiet_nan();
        return r;
      }
      const ElementRounding e = round_to_code(x / block.divisor, f, u);
      r.code = e.code;
      r.saturated = e.saturated;
      r.value = decode_code(e.code, f) * block.divisor;
      return r;
    }
  }
  return r;
}

BlockParams block_params(const QuantSpec& spec, float global, const float* values, int n) {
  BlockParams p;
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (!is_finite_bits(values[i])) {
      p.nonfinite = true;
    } else {
      amax = std::max(amax, std::fabs(values[i]));
    }
  }
  if (spec.format == QuantFormat::kMXFP4) {
    p.scale_code = mx_block_scale_code(values, n, amax, p.nonfinite, spec.scale_rule);
    p.nonfinite = p.scale_code == kE8M0NaN;
    if (!p.nonfinite) p.inverse = mx_inverse_scale(p.scale_code);
  } else {  // NVFP4
    p.scale_code = nvfp4_block_scale_code_for(values, n, amax, p.nonfinite, global, spec.scale_rule);
    p.nonfinite = p.scale_code == kE4M3NaNCode;
    if (!p.nonfinite) p.divisor = nvfp4_block_scale(p.scale_code) * global;
  }
  return p;
}

// The scale parameters of a block (1-D) or tile (2-D) from its amax, as block_params computes
// them from the values.
BlockParams params_of_amax(const QuantSpec& spec, float global, float amax, bool nonfinite) {
  BlockParams p;
  if (spec.format == QuantFormat::kMXFP4) {
    p.scale_code = e8m0_scale_code(amax, nonfinite, spec.scale_rule, kE2M1Emax);
    p.nonfinite = p.scale_code == kE8M0NaN;
    if (!p.nonfinite) p.inverse = mx_inverse_scale(p.scale_code);
  } else {  // NVFP4
    p.scale_code = nvfp4_block_scale_code(amax, nonfinite, global);
    p.nonfinite = p.scale_code == kE4M3NaNCode;
    if (!p.nonfinite) p.divisor = nvfp4_block_scale(p.scale_code) * global;
  }
  return p;
}

// 2-D blocks (docs/design.md §3): the amax of every square tile of the tensor (never rotated:
// check_shape), which every line crossing the tile then uses as its block's amax. Tiles are
// numbered along the lines' direction, tile (line / tile, j / tile) of the line-major values:
// along rows and down columns the tiles hold the same elements, so both axes get the same scales.
class TileAmax {
 public:
  TileAmax(const std::vector<float>& rotated, const TensorLines& lines, int tile)
      : tile_(tile), per_band_(lines.length / tile), amax_(static_cast<size_t>(lines.count / tile * per_band_), 0.0f),
        nonfinite_(amax_.size(), false) {
    for (int64_t line = 0; line < lines.count; ++line) {
      const float* values = rotated.data() + line * lines.length;
      for (int64_t j = 0; j < lines.length; ++j) {
        const size_t t = index(line, j);
        if (!is_finite_bits(values[j])) {
          nonfinite_[t] = true;
        } else {
          amax_[t] = std::max(amax_[t], std::fabs(values[j]));
        }
      }
    }
  }
  float amax(int64_t line, int64_t j) const { return amax_[index(line, j)]; }
  bool nonfinite(int64_t line, int64_t j) const { return nonfinite_[index(line, j)]; }

 private:
  size_t index(int64_t line, int64_t j) const {
    return static_cast<size_t>((line / tile_) * per_band_ + j / tile_);
  }
  int64_t tile_, per_band_;
  std::vector<float> amax_;
  std::vector<bool> nonfinite_;
};

void write_code(uint8_t* packed, const TensorLines& lines, QuantFormat format, int64_t line,
                int64_t j, uint32_t code) {
  if (is_fp4(format)) {
    uint8_t& byte = packed[line * (lines.length / 2) + j / 2];
    const uint8_t nibble = static_cast<uint8_t>(code & 0xFu);
    byte = (j % 2 == 0) ? static_cast<uint8_t>((byte & 0xF0u) | nibble)
                        : static_cast<uint8_t>((byte & 0x0Fu) | (nibble << 4));
  } else {
    packed[line * lines.length + j] = static_cast<uint8_t>(code);
  }
}

void check_request(const QuantSpec& spec, int64_t rows, int64_t cols, Axis axis,
                   const QuantOutputs& out, const Fp8DelayedScale& delayed) {
  const std::string problem = check_shape(spec, rows, cols, axis);
  if (!problem.empty()) throw std::invalid_argument(problem);
  const std::string delayed_problem = fp8_delayed_problem(delayed, spec.format);
  if (!delayed_problem.empty()) throw std::invalid_argument(delayed_problem);
  const bool has_codes = element_format(spec.format).has_value();
  if ((out.packed || out.tensor_scale) && !has_codes)
    throw std::invalid_argument(std::string(to_string(spec.format)) + " has no packed codes");
  if (out.scales && block_size(spec.format) == 0)
    throw std::invalid_argument(std::string(to_string(spec.format)) + " has no block scales");
}

}  // namespace

size_t packed_bytes(QuantFormat format, int64_t rows, int64_t cols) {
  if (is_fp4(format)) return static_cast<size_t>(rows * cols / 2);
  return element_format(format) ? static_cast<size_t>(rows * cols) : 0;
}

size_t scale_bytes(QuantFormat format, int64_t rows, int64_t cols) {
  const int block = block_size(format);
  return block == 0 ? 0 : static_cast<size_t>(rows * cols / block);
}

std::string fp8_delayed_problem(const Fp8DelayedScale& delayed, QuantFormat format) {
  if (delayed.window == nullptr) return {};
  if (format != QuantFormat::kFP8E4M3 && format != QuantFormat::kFP8E5M2)
    return "delayed scaling applies to fp8-e4m3 and fp8-e5m2 only, got " + std::string(to_string(format));
  if (delayed.record == nullptr) return "delayed scaling needs where to record the tensor's amax";
  if (delayed.margin < 0 || delayed.margin > kMaxFp8Margin)
    return "delayed scaling's margin must be in [0, " + std::to_string(kMaxFp8Margin) + "], got " +
           std::to_string(delayed.margin);
  return {};
}

QuantTelemetry quantize(const float* x, int64_t rows, int64_t cols, Axis axis,
                        const QuantSpec& spec, const RngKey& key, const QuantOutputs& out,
                        const Fp8DelayedScale& delayed) {
  check_request(spec, rows, cols, axis, out, delayed);
  const TensorLines lines{rows, cols, axis};
  const HadamardSigns signs = hadamard_signs(spec.hadamard, key);
  const std::vector<float> rotated = detail::rotated_lines(x, lines, spec, signs);

  const bool per_tensor = spec.format == QuantFormat::kNVFP4 ||
                          spec.format == QuantFormat::kFP8E4M3 ||
                          spec.format == QuantFormat::kFP8E5M2;
  float global = 1.0f;
  BlockParams tensor_block;  // FP8: one "block" spanning the tensor
  if (per_tensor) {
    const TensorAmax t = tensor_amax(rotated);
    const float amax = t.nonfinite ? quiet_nan() : t.amax;
    if (spec.format == QuantFormat::kNVFP4) {
      global = nvfp4_global_scale(amax);
    } else {
      // Delayed scaling (docs/design.md §3): the window's scale, and this tensor's amax recorded.
      if (delayed.window != nullptr) {
        global = fp8_delayed_scale(*delayed.window, t.amax, t.nonfinite, delayed.margin, *element_format(spec.format));
        *delayed.record = std::max(*delayed.record, fp8_amax_record(t.amax, t.nonfinite));
      } else {
        global = fp8_tensor_scale(amax, *element_format(spec.format));
      }
      tensor_block.nonfinite = global != global;
      tensor_block.divisor = global;
    }
    if (out.tensor_scale) *out.tensor_scale = global;
  }

  const int block = block_size(spec.format);
  const bool stochastic = spec.rounding == Rounding::kStochastic;
  // Scales come from the values themselves; the elements rounded (and the telemetry's reference)
  // are prescale * value (docs/design.md §3).
  const float prescale = effective_sr_prescale(spec);
  std::vector<QuantTelemetry> partial(
      static_cast<size_t>(detail::line_group_count(lines.count, lines.length)));
  // 2-D blocks: the tiles' amax first; the element loop below takes each block's scale from its tile.
  std::optional<TileAmax> tiles;
  if (const int tile = block_2d_tile(spec); tile != 0) tiles.emplace(rotated, lines, tile);

  detail::parallel_for_line_groups(lines.count, lines.length, [&](int64_t group, int64_t first,
                                                                  int64_t last) {
    QuantTelemetry& tel = partial[static_cast<size_t>(group)];
    for (int64_t line = first; line < last; ++line) {
      const float* values = rotated.data() + line * lines.length;
      const int64_t step = block == 0 ? lines.length : block;
      for (int64_t b0 = 0; b0 < lines.length; b0 += step) {
        BlockParams params = tensor_block;
        if (block != 0) {
          params = tiles ? params_of_amax(spec, global, tiles->amax(line, b0), tiles->nonfinite(line, b0))
                         : block_params(spec, global, values + b0, block);
          if (out.scales) out.scales[line * (lines.length / block) + b0 / block] = params.scale_code;
        }
        if (block != 0 && params.nonfinite) ++tel.nonfinite_blocks;
        for (int64_t j = b0; j < b0 + step; ++j) {
          const float v = values[j] * prescale;
          const int64_t index = lines.logical_index(line, j);
          const float u = stochastic ? sr_uniform(key, static_cast<uint64_t>(index)) : -1.0f;
          const ElementResult r = round_element(spec, global, params, v, u);
          const Dequantized f32 = clamp_to_finite(r.value, FLT_MAX);
          const Dequantized b16 = clamp_to_finite(r.value, kBF16MaxFinite);
          if (out.dequant) out.dequant[index] = f32.value;
          if (out.dequant_bf16) out.dequant_bf16[index] = float_to_bf16_bits(b16.value);
          if (out.packed) write_code(out.packed, lines, spec.format, line, j, r.code);

          ++tel.elements;
          tel.saturated += r.saturated;
          tel.dequant_clamped += f32.clamped || (out.dequant_bf16 && b16.clamped);
          if (params.nonfinite || !is_finite_bits(v)) continue;
          if (v != 0.0f) {
            ++tel.nonzero_inputs;
            tel.flushed += f32.value == 0.0f;
          }
          const double err = static_cast<double>(f32.value) - static_cast<double>(v);
          tel.sum_sq_error += err * err;
          tel.sum_sq_input += static_cast<double>(v) * static_cast<double>(v);
          tel.sum_error += err;
        }
      }
    }
  });

  QuantTelemetry total;
  for (const auto& p : partial) total.merge(p);
  if (tensor_block.nonfinite) total.nonfinite_blocks = 1;
  return total;
}

void dequantize_packed(const uint8_t* packed, const uint8_t* scales, float tensor_scale,
                       int64_t rows, int64_t cols, Axis axis, QuantFormat format, float* out) {
  const MinifloatFormat f = element_format(format).value_or(kE2M1);
  if (!element_format(format))
    throw std::invalid_argument(std::string(to_string(format)) + " has no packed codes");
  const QuantSpec spec{format};
  const std::string problem = check_shape(spec, rows, cols, axis);
  if (!problem.empty()) throw std::invalid_argument(problem);
  const TensorLines lines{rows, cols, axis};
  const int block = block_size(format);
  detail::parallel_for_line_groups(lines.count, lines.length, [&](int64_t, int64_t first,
                                                                  int64_t last) {
    for (int64_t line = first; line < last; ++line) {
      for (int64_t j = 0; j < lines.length; ++j) {
        float v;
        if (is_fp4(format)) {
          const uint8_t byte = packed[line * (lines.length / 2) + j / 2];
          const uint32_t code = (j % 2 == 0) ? (byte & 0xFu) : (byte >> 4);
          const uint8_t scale = scales[line * (lines.length / block) + j / block];
          v = format == QuantFormat::kMXFP4 ? mx_dequant(code, scale)
                                            : nvfp4_dequant(code, scale, tensor_scale);
        } else {
          const uint32_t code = packed[line * lines.length + j];
          v = decode_code(code, f) * tensor_scale;
        }
        out[lines.logical_index(line, j)] = clamp_to_finite(v, FLT_MAX).value;
      }
    }
  });
}

}  // namespace mxablate::kernels
