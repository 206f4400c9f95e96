#include "mxablate/contract/gpu_memory_env.h"

#include <charconv>
#include <cstdlib>
#include <string>
#include <string_view>

#include "json_reading.h"
#include "mxablate/contract/run_config.h"

namespace mxablate::contract {

std::optional<int64_t> gpu_memory_from_environment() {
  const char* raw = std::getenv(kGpuMemoryEnv);
  if (!raw || !*raw) return std::nullopt;
  const std::string_view text(raw);
  constexpr int64_t kLargest = int64_t{1} << 60;  // no GPU has an exabyte
  int64_t bytes = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), bytes);
  if (ec != std::errc() || end != text.data() + text.size() || bytes < 1 || bytes > kLargest)
    // As JSON shows a string: control characters and stray bytes escaped, one line.
    throw ConfigError(std::string(kGpuMemoryEnv) + ": expected a number of bytes from 1 to 2^60, got " +
                      detail::shown(nlohmann::json(std::string(text.substr(0, 64)))));
  return bytes;
}

}  // namespace mxablate::contract
