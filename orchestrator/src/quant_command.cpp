// `mxablate quant`: quantize a dumped tensor with the CPU reference and report what happened to
// it (relative error, saturation, flush-to-zero, bias). The outputs are the exact values a
// training run with the same settings would have multiplied.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli_errors.h"
#include "commands.h"
#include "mxablate/kernels/quantize.h"
#include "npy.h"

namespace mxablate::cli {
namespace {

using namespace mxablate::kernels;

struct QuantOptions {
  std::string in, out, codes, scales;
  std::string format = "mxfp4", axis = "rows", scale_rule = "floor", rounding = "nearest";
  std::string hadamard = "none", gemm = "fprop", operand = "a", blocks = "1d";
  int hadamard_size = 16;
  float sr_prescale = 1.0f;
  uint64_t seed = 0;
  uint32_t step = 0, layer = 0;
  int threads = 0;
  bool json = false;
};

template <typename T>
T parse_choice(const std::optional<T>& parsed, const std::string& option, const std::string& value,
               const std::string& allowed) {
  if (!parsed) throw InputError(option + ": '" + value + "' is not one of: " + allowed);
  return *parsed;
}

// Codes one per element, in the input's shape (numpy users index them like the input).
std::vector<uint8_t> unpack_codes(const std::vector<uint8_t>& packed, QuantFormat format,
                                  int64_t rows, int64_t cols, Axis axis) {
  std::vector<uint8_t> codes(static_cast<size_t>(rows * cols));
  const int64_t length = axis == Axis::kRows ? cols : rows;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t line = axis == Axis::kRows ? r : c;
      const int64_t j = axis == Axis::kRows ? c : r;
      uint8_t code;
      if (is_fp4(format)) {
        const uint8_t byte = packed[static_cast<size_t>(line * (length / 2) + j / 2)];
        code = (j % 2 == 0) ? (byte & 0x0F) : (byte >> 4);
      } else {
        code = packed[static_cast<size_t>(line * length + j)];
      }
      codes[static_cast<size_t>(r * cols + c)] = code;
    }
  }
  return codes;
}

// Scales in the tensor's orientation: (rows, cols/block) along rows, (rows/block, cols) along
// columns, so that scales.repeat(block, axis) lines up with the input.
std::vector<uint8_t> orient_scales(const std::vector<uint8_t>& line_major, int64_t rows,
                                   int64_t cols, Axis axis, int block, int64_t& out_rows,
                                   int64_t& out_cols) {
  if (axis == Axis::kRows) {
    out_rows = rows;
    out_cols = cols / block;
    return line_major;
  }
  out_rows = rows / block;
  out_cols = cols;
  std::vector<uint8_t> oriented(line_major.size());
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t b = 0; b < out_rows; ++b)
      oriented[static_cast<size_t>(b * cols + c)] = line_major[static_cast<size_t>(c * out_rows + b)];
  return oriented;
}

// Everything printed back comes from the parsed spec, through the kernels' name tables.
void print_report(const QuantOptions& o, const QuantSpec& spec, Axis axis, const npy::Matrix& m,
                  const QuantTelemetry& t, std::optional<float> tensor_scale) {
  const auto name = [](auto v) { return std::string(to_string(v)); };
  nlohmann::json j{{"input", o.in},
                   {"shape", {m.rows, m.cols}},
                   {"dtype", m.dtype},
                   {"format", name(spec.format)},
                   {"axis", name(axis)},
                   {"blocks", name(spec.blocks)},
                   {"scale_rule", name(spec.scale_rule)},
                   {"rounding", name(spec.rounding)},
                   {"hadamard", name(spec.hadamard)},
                   {"hadamard_size", spec.hadamard_size},
                   {"sr_prescale", spec.sr_prescale},
                   {"elements", t.elements},
                   {"relative_error", t.relative_error()},
                   {"fraction_saturated", t.fraction_saturated()},
                   {"fraction_flushed", t.fraction_flushed()},
                   {"mean_error", t.mean_error()},
                   {"nonfinite_blocks", t.nonfinite_blocks},
                   {"dequant_clamped", t.dequant_clamped}};
  if (tensor_scale) j["tensor_scale"] = *tensor_scale;
  if (o.json) {
    std::cout << j.dump() << "\n";
    return;
  }
  // Formats without block scales ignore the block shape.
  const std::string blocks = block_size(spec.format) != 0 ? " in " + name(spec.blocks) + " blocks" : "";
  std::printf("%s: %lld x %lld %s -> %s along %s%s (scale rule %s, %s rounding, Hadamard %s",
              o.in.c_str(), static_cast<long long>(m.rows), static_cast<long long>(m.cols),
              m.dtype.c_str(), name(spec.format).c_str(), name(axis).c_str(), blocks.c_str(),
              name(spec.scale_rule).c_str(), name(spec.rounding).c_str(), name(spec.hadamard).c_str());
  if (spec.hadamard != HadamardMode::kNone) std::printf(" %d", spec.hadamard_size);
  if (effective_sr_prescale(spec) != 1.0f)
    std::printf(", SR pre-scale %.9g: values hold Q(p x), errors are against p x", spec.sr_prescale);
  std::printf(")\n");
  std::printf("  relative error      %.6g\n", t.relative_error());
  std::printf("  saturated           %.4f %%  (%llu of %llu)\n", 100 * t.fraction_saturated(),
              static_cast<unsigned long long>(t.saturated),
              static_cast<unsigned long long>(t.elements));
  std::printf("  flushed to zero     %.4f %%  of non-zeros (%llu)\n", 100 * t.fraction_flushed(),
              static_cast<unsigned long long>(t.flushed));
  std::printf("  mean signed error   %.6g\n", t.mean_error());
  if (t.nonfinite_blocks)
    std::printf("  non-finite blocks   %llu (NaN scale: NaN/Inf propagate)\n",
                static_cast<unsigned long long>(t.nonfinite_blocks));
  if (t.dequant_clamped)
    std::printf("  clamped to float32  %llu values beyond float range\n",
                static_cast<unsigned long long>(t.dequant_clamped));
  if (tensor_scale) std::printf("  tensor scale        %.9g\n", *tensor_scale);
}

void run_quant(const QuantOptions& o) {
  QuantSpec spec;
  spec.format =
      parse_choice(parse_quant_format(o.format), "--format", o.format, quant_format_names());
  spec.scale_rule =
      parse_choice(parse_scale_rule(o.scale_rule), "--scale-rule", o.scale_rule, scale_rule_names());
  spec.blocks = parse_choice(parse_block_shape(o.blocks), "--blocks", o.blocks, block_shape_names());
  spec.rounding =
      parse_choice(parse_rounding(o.rounding), "--rounding", o.rounding, rounding_names());
  spec.hadamard = parse_choice(parse_hadamard_mode(o.hadamard), "--hadamard", o.hadamard,
                               hadamard_mode_names());
  spec.hadamard_size = o.hadamard_size;
  if (const std::string problem = check_sr_prescale(o.sr_prescale); !problem.empty())
    throw InputError("--sr-prescale: " + problem);
  spec.sr_prescale = o.sr_prescale;
  const Axis axis = parse_choice(parse_axis(o.axis), "--axis", o.axis, axis_names());
  RngKey key;
  key.seed = o.seed;
  key.step = o.step;
  key.layer = o.layer;
  key.gemm = parse_choice(parse_gemm_kind(o.gemm), "--gemm", o.gemm, gemm_kind_names());
  if (o.operand != "a" && o.operand != "b")
    throw InputError("--operand: '" + o.operand + "' is not one of: a, b");
  key.operand = o.operand == "a" ? Operand::kA : Operand::kB;
  if (!o.codes.empty() && !element_format(spec.format))
    throw InputError("--codes: " + std::string(to_string(spec.format)) + " has no codes to write");
  if (!o.scales.empty() && block_size(spec.format) == 0)
    throw InputError("--scales: " + std::string(to_string(spec.format)) +
                     " has no block scales to write");
  if (o.threads > 0) set_cpu_threads(o.threads);

  npy::Matrix m;
  try {
    m = npy::read_matrix(o.in);
  } catch (const npy::NpyError& e) {
    throw InputError(e.what());
  }
  const std::string shape_problem = check_shape(spec, m.rows, m.cols, axis);
  if (!shape_problem.empty()) throw InputError(o.in + ": " + shape_problem);

  std::vector<float> dequant(m.data.size());
  std::vector<uint8_t> packed(o.codes.empty() ? 0 : packed_bytes(spec.format, m.rows, m.cols));
  std::vector<uint8_t> scales(o.scales.empty() ? 0 : scale_bytes(spec.format, m.rows, m.cols));
  float tensor_scale = 0;
  QuantOutputs out;
  out.dequant = dequant.data();
  if (!packed.empty()) out.packed = packed.data();
  if (!scales.empty()) out.scales = scales.data();
  const bool has_tensor_scale = spec.format == QuantFormat::kNVFP4 ||
                                spec.format == QuantFormat::kFP8E4M3 ||
                                spec.format == QuantFormat::kFP8E5M2;
  if (has_tensor_scale) out.tensor_scale = &tensor_scale;
  const QuantTelemetry t = quantize(m.data.data(), m.rows, m.cols, axis, spec, key, out);

  npy::write_matrix(o.out, dequant.data(), m.rows, m.cols);
  if (!packed.empty()) {
    const std::vector<uint8_t> codes = unpack_codes(packed, spec.format, m.rows, m.cols, axis);
    npy::write_matrix(o.codes, codes.data(), m.rows, m.cols);
  }
  if (!scales.empty()) {
    int64_t sr = 0, sc = 0;
    const std::vector<uint8_t> oriented =
        orient_scales(scales, m.rows, m.cols, axis, block_size(spec.format), sr, sc);
    npy::write_matrix(o.scales, oriented.data(), sr, sc);
  }
  print_report(o, spec, axis, m, t, has_tensor_scale ? std::optional<float>(tensor_scale) : std::nullopt);
}

}  // namespace

void register_quant_command(CLI::App& app) {
  auto opts = std::make_shared<QuantOptions>();
  CLI::App* cmd = app.add_subcommand(
      "quant",
      "Quantize a 2-D .npy tensor (float32/float16, C order) with the CPU reference kernels; "
      "write the dequantized values and print quantization telemetry");
  cmd->add_option("--in", opts->in, "input .npy (2-D float32 or float16, C order)")->required();
  cmd->add_option("--out", opts->out, "output .npy: dequantized float32, same shape")->required();
  cmd->add_option("--codes", opts->codes,
                  "also write the element codes as uint8 .npy, one per element (E2M1: sign<<3 | "
                  "magnitude; FP8: the 8-bit code)");
  cmd->add_option("--scales", opts->scales,
                  "also write the block scales as uint8 .npy (E8M0 biased exponents for mxfp4, "
                  "E4M3 bits for nvfp4); shape (rows, cols/block) along rows, (rows/block, cols) "
                  "along cols");
  cmd->add_option("--format", opts->format, "mxfp4 | nvfp4 | fp8-e4m3 | fp8-e5m2 | bf16 | fp32")
      ->capture_default_str();
  cmd->add_option("--axis", opts->axis, "rows (blocks along a row) | cols (down a column)")
      ->capture_default_str();
  cmd->add_option("--scale-rule", opts->scale_rule,
                  "block scale rule: floor | ceil | even (MXFP4 E8M0 exponent) | mse (MXFP4: of "
                  "e = floor(log2 amax) - 2 and e + 1 the one with the smaller squared error; "
                  "NVFP4: the block max mapped to 4 or 6, whichever errs less); NVFP4 ignores "
                  "floor, ceil and even")
      ->capture_default_str();
  cmd->add_option("--rounding", opts->rounding, "nearest | stochastic")->capture_default_str();
  cmd->add_option("--sr-prescale", opts->sr_prescale,
                  "stochastic rounding only: multiply each value by P in [2^-24, 1] before "
                  "rounding, scales still chosen from the values (0.75 with floor: nothing "
                  "saturates); --out holds Q(P x) and the errors are measured against P x")
      ->capture_default_str();
  cmd->add_option("--seed", opts->seed, "run seed (stochastic rounding, random Hadamard)")
      ->capture_default_str();
  cmd->add_option("--step", opts->step, "training step of the random streams")->capture_default_str();
  cmd->add_option("--layer", opts->layer, "layer index of the random streams")->capture_default_str();
  cmd->add_option("--gemm", opts->gemm, "GEMM of the random streams: fprop | dgrad | wgrad")
      ->capture_default_str();
  cmd->add_option("--operand", opts->operand, "operand of the random streams: a | b")
      ->capture_default_str();
  cmd->add_option("--hadamard", opts->hadamard,
                  "none | deterministic | fixed-random | per-step-random")
      ->capture_default_str();
  cmd->add_option("--hadamard-size", opts->hadamard_size, "16 | 32 | 64 | 128")
      ->capture_default_str();
  cmd->add_option("--blocks", opts->blocks,
                  "1d (a scale per block along the axis) | 2d (a scale per square tile, 32x32 mxfp4, "
                  "16x16 nvfp4: without a rotation rows and cols give the same values; both dimensions "
                  "must be multiples of the tile)")
      ->capture_default_str();
  cmd->add_option("--threads", opts->threads, "CPU threads (results do not depend on it)");
  cmd->add_flag("--json", opts->json, "print the telemetry as one JSON object");
  cmd->callback([opts] { run_quant(*opts); });
}

}  // namespace mxablate::cli
