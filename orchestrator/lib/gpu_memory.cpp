#include "mxablate/orchestrator/gpu_memory.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "mxablate/orchestrator/command_runner.h"
#include "mxablate/trainer/plan/memory_plan.h"
#include "mxablate/trainer/plan/run_fit.h"

namespace mxablate::orchestrator {
namespace {

constexpr double kLargestSize = 1152921504606846976.0;  // 2^60 bytes: no GPU has an exabyte

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

int64_t parse_memory_size(std::string_view text) {
  const auto bad = [&] {
    return std::invalid_argument(fmt::format(
        "expected a size such as 80GB, 80GiB or 141e9 (bytes), more than 0, got '{}'", text));
  };
  const std::string s(text);
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(s, &used);
  } catch (const std::exception&) {
    throw bad();
  }
  // std::stod takes "inf", "nan" and hexadecimal floats: sizes are written in decimal.
  for (size_t i = 0; i < used; ++i)
    if (!std::isdigit(static_cast<unsigned char>(s[i])) && s[i] != '.' && s[i] != 'e' &&
        s[i] != 'E' && s[i] != '+' && s[i] != '-')
      throw bad();
  std::string unit = lower(s.substr(used));
  if (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);
  double scale = 0;
  if (unit.empty() || unit == "b") scale = 1;
  else if (unit == "kb") scale = 1e3;
  else if (unit == "mb") scale = 1e6;
  else if (unit == "gb") scale = 1e9;
  else if (unit == "tb") scale = 1e12;
  else if (unit == "kib") scale = 1024.0;
  else if (unit == "mib") scale = 1048576.0;
  else if (unit == "gib") scale = 1073741824.0;
  else if (unit == "tib") scale = 1099511627776.0;
  else throw bad();
  const double bytes = value * scale;
  if (!std::isfinite(bytes) || bytes < 1 || bytes > kLargestSize) throw bad();
  return static_cast<int64_t>(std::floor(bytes));
}

std::optional<int64_t> query_gpu_memory(std::string* note) {
  const auto fail = [&](const std::string& why) -> std::optional<int64_t> {
    if (note) *note = why;
    return std::nullopt;
  };
  const std::optional<std::filesystem::path> smi = find_program("nvidia-smi");
  if (!smi) return fail("nvidia-smi is not on PATH");
  CommandOutput out;
  try {
    out = run_command(*smi, {"--query-gpu=memory.total", "--format=csv,noheader,nounits"},
                      std::chrono::seconds(20));
  } catch (const std::exception& e) {
    return fail(fmt::format("nvidia-smi could not be started ({})", e.what()));
  }
  if (out.timed_out) return fail("nvidia-smi did not answer within 20 s");
  if (out.exit_code != 0) return fail(fmt::format("nvidia-smi failed (exit code {})", out.exit_code));
  // One line per GPU, in MiB. The smallest: a run may get any of them.
  std::optional<int64_t> smallest;
  std::istringstream lines(out.out);
  for (std::string line; std::getline(lines, line);) {
    line.erase(std::remove_if(line.begin(), line.end(),
                              [](unsigned char c) { return std::isspace(c) != 0; }),
               line.end());
    if (line.empty()) continue;
    if (!std::all_of(line.begin(), line.end(), [](unsigned char c) { return std::isdigit(c) != 0; }) ||
        line.size() > 12)
      return fail(fmt::format("nvidia-smi printed '{}', not a size in MiB", line));
    const int64_t bytes = std::stoll(line) * trainer::kMiB;
    smallest = smallest ? std::min(*smallest, bytes) : bytes;
  }
  if (!smallest || *smallest <= 0) return fail("nvidia-smi reported no GPU");
  return smallest;
}

void check_gpu_memory(const Recipe& recipe, const Plan& plan,
                      const DatasetVocabularies& vocabularies, const GpuMemory& gpu) {
  for (const RunSpec& run : plan.runs) {
    if (run.config.device != contract::Device::kCUDA) continue;
    const auto vocab = vocabularies.find(run.config.data.dataset);
    if (vocab == vocabularies.end()) continue;
    // The planner resolved and checked every run's model: this cannot throw.
    const trainer::ModelShape shape = trainer::model_shape(run.config.model);
    if (trainer::plan_memory(run.config, shape, vocab->second).total() <= gpu.bytes) continue;
    std::string key;
    const std::string why =
        trainer::memory_refusal(run.config, shape, vocab->second, gpu.bytes, gpu.source, &key);
    const Location l = run.where(key);
    throw RecipeError(recipe.file, l.known() ? l : recipe.arms[static_cast<size_t>(run.arm_index)].at,
                      fmt::format("{}: {} (run: {})", key, why, run_label(run)));
  }
}

}  // namespace mxablate::orchestrator
