// MXABLATE_GPU_MEMORY (contract/gpu_memory_env.h): the GPU memory `mxablate run` tells a trainer
// to plan `auto` recompute into, read once at the trainer's boundary; anything but a number of
// bytes is one line naming the variable.
#include <cstdlib>

#include "catch.h"
#include "mxablate/contract/gpu_memory_env.h"
#include "mxablate/contract/run_config.h"

using namespace mxablate::contract;

namespace {

std::string refusal_of(const char* value) {
  ::setenv(kGpuMemoryEnv, value, 1);
  try {
    gpu_memory_from_environment();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("MXABLATE_GPU_MEMORY: bytes, or unset, or one line naming the variable") {
  ::unsetenv(kGpuMemoryEnv);
  CHECK_FALSE(gpu_memory_from_environment());
  ::setenv(kGpuMemoryEnv, "", 1);
  CHECK_FALSE(gpu_memory_from_environment());
  ::setenv(kGpuMemoryEnv, "85520809984", 1);
  CHECK(gpu_memory_from_environment() == int64_t{85520809984});
  ::setenv(kGpuMemoryEnv, "1152921504606846976", 1);  // 2^60, the largest
  CHECK(gpu_memory_from_environment() == int64_t{1} << 60);
  const std::string expected = "MXABLATE_GPU_MEMORY: expected a number of bytes from 1 to 2^60, got ";
  CHECK(refusal_of("0") == expected + "\"0\"");
  CHECK(refusal_of("-5") == expected + "\"-5\"");
  CHECK(refusal_of("80GB") == expected + "\"80GB\"");
  CHECK(refusal_of("1e9") == expected + "\"1e9\"");
  CHECK(refusal_of(" 42") == expected + "\" 42\"");
  CHECK(refusal_of("1152921504606846977") == expected + "\"1152921504606846977\"");
  CHECK(refusal_of("99999999999999999999999") == expected + "\"99999999999999999999999\"");
  // Control characters are shown as escapes: the message stays one line.
  CHECK(refusal_of("4\n2\x1b[2J") == expected + "\"4\\n2\\u001b[2J\"");
  ::unsetenv(kGpuMemoryEnv);
}
