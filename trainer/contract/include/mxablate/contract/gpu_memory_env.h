// The GPU memory a run may plan into (docs/design.md §4, "Recompute chosen by the memory plan"):
// `mxablate run` sets MXABLATE_GPU_MEMORY for a trainer that shares its GPU with other runs
// (--per-gpu) or was told the GPU's size (--gpu-memory); without it a trainer plans into the
// whole device it sees. This header is the one definition both sides use.
#pragma once

#include <cstdint>
#include <optional>

namespace mxablate::contract {

inline constexpr const char* kGpuMemoryEnv = "MXABLATE_GPU_MEMORY";

// MXABLATE_GPU_MEMORY, parsed once at the trainer's boundary: nullopt when unset or empty; the
// bytes when it is a decimal number from 1 to 2^60. Anything else is a ConfigError naming the
// variable and the value.
std::optional<int64_t> gpu_memory_from_environment();

}  // namespace mxablate::contract
