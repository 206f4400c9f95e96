// The measured training rates `mxablate plan --gpu` turns into GPU-hours: docs/performance.md's
// table "Rates the plan uses", one row per measured configuration, built into the binary at
// build time (orchestrator/embed_measured_rates.cmake) and parsed here into types. Parsing is
// strict: a missing or unknown column, a cell that is not what its column holds, a row of another
// width or a configuration given twice is an error naming the table's file and line, because a
// figure the plan misreads is worse than none.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "mxablate/contract/quant_settings.h"

namespace mxablate::orchestrator {

// Where the rates come from, as the plan names them.
inline constexpr std::string_view kMeasuredRatesFile = "docs/performance.md";
inline constexpr std::string_view kMeasuredRatesSection = "Rates the plan uses";

// The GPUs a rate was measured on (`--gpu`, the table's `gpu` column): one name table.
enum class GpuKind : uint8_t { kH100, kH200 };
std::string_view to_string(GpuKind g);
std::optional<GpuKind> parse_gpu_kind(std::string_view s);
std::string gpu_kind_names();  // "h100, h200"

// The numerics of a measured run (the table's `arm` column; run_cost.h's arm_class gives a
// run's): the paper's arms that were timed, and the GEMM path where it is not the default's
// engine. One name table.
enum class ArmClass : uint8_t {
  kBF16,            // bf16: every GEMM in BF16
  kFP8,             // fp8: F+D+W per-tensor FP8, current scaling, on FP8 tensor cores
  kMXFP4,           // mxfp4 F+D+W: emulated
  kMXFP4H16,        // mxfp4 F+D+W+H16: the deterministic 16-point rotation on Wgrad, emulated
  kMXFP4H16Fp8,     // the same with quant.gemm_path fp8 (Hopper's 1×128 blockwise FP8)
  kMXFP4H16Exact,   // the same with quant.gemm_path fp8-where-exact
};
std::string_view to_string(ArmClass a);
std::optional<ArmClass> parse_arm_class(std::string_view s);
std::string arm_class_names();  // "bf16, fp8, mxfp4 F+D+W, …"

// The blocks a measured run recomputed in the backward: every block, or the first `blocks`
// (0: none; what `auto` chose is written as the count).
struct MeasuredRecompute {
  bool every_block = false;
  int64_t blocks = 0;      // recomputed whole (every_block: all of them)
  bool selective = false;  // the others made their norms' outputs and SwiGLU's product again
  int64_t of(int64_t n_layers) const { return every_block ? n_layers : blocks; }
  // Whether a run that recomputed this did at least the work of one recomputing `whole` blocks
  // whole and, if `selective`, the rest selectively: more blocks whole, or as many and selective
  // where that is (a block recomputed whole does more than one made again selectively).
  bool covers(int64_t whole, bool selective_too, int64_t n_layers) const {
    return of(n_layers) > whole || (of(n_layers) == whole && (selective || !selective_too || whole == n_layers));
  }
  // Whether it is exactly that recompute (every block whole has no selective part).
  bool is(int64_t whole, bool selective_too, int64_t n_layers) const {
    return of(n_layers) == whole && (selective == selective_too || whole == n_layers);
  }
  bool operator==(const MeasuredRecompute&) const = default;
};

struct MeasuredRate {
  int line = 0;                  // the row's line in kMeasuredRatesFile
  std::string model;             // a preset's name
  int64_t seq_len = 0;
  int64_t vocab = 0;
  int64_t micro_batch_tokens = 0;  // one forward and backward on one rank
  GpuKind gpu = GpuKind::kH100;
  int64_t ranks = 1;             // parallel.data
  contract::ShardLevel shard = contract::ShardLevel::kNone;
  ArmClass arm = ArmClass::kBF16;
  MeasuredRecompute recompute;
  int64_t n_layers = 0;          // the preset's blocks (the `K of N` the row may give)
  double tokens_per_second_per_gpu = 0;
  std::string date;              // YYYY-MM-DD
  std::string source;            // the section and call it is copied from
};

// The row's recompute as the table writes it: "every block", "none", "30 of 32".
std::string recompute_text(const MeasuredRate& r);

struct MeasuredRates {
  std::string file;  // where the table is, for messages
  std::vector<MeasuredRate> rows;
  std::string first_date, last_date;  // of the rows
};

struct MeasuredRatesError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Parses the section "## Rates the plan uses" (its heading line first) whose heading is on line
// `first_line` of `file`. Throws MeasuredRatesError "FILE:LINE: what is wrong".
MeasuredRates parse_measured_rates(std::string_view section, std::string_view file, int first_line);

// The table built into this binary, parsed once. Throws MeasuredRatesError where the build's copy
// of docs/performance.md does not parse (its unit test then fails too).
const MeasuredRates& built_in_measured_rates();

}  // namespace mxablate::orchestrator
