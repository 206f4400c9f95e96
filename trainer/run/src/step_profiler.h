// `mxablate-train --profile-steps FIRST:LAST --profile-trace FILE`: a Kineto trace (Chrome trace
// JSON: every CUDA kernel and every ATen op with its time) of optimizer steps FIRST..LAST,
// 1-based and inclusive. It is how docs/performance.md's profile figures are made
// (scripts/profile-summary.py turns a trace into the table). Profiling slows the steps it covers,
// so the run's tokens/s while it is on are not the run's pace.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>

namespace mxablate::trainer {

struct ProfileRequest {
  int64_t first_step = 0;
  int64_t last_step = 0;
  std::string trace_path;
};

// "FIRST:LAST" (1 <= FIRST <= LAST) or one step "N"; nullopt for anything else.
std::optional<ProfileRequest> parse_profile_steps(const std::string& steps, std::string trace_path);

class StepProfiler {
 public:
  // With a request, profiles nothing once and writes that empty trace to its path: a LibTorch
  // without Kineto or an unwritable path fails here (contract::ConfigError, exit 2), before the
  // run starts, not after its first steps.
  StepProfiler(std::optional<ProfileRequest> request, const at::Device& device);
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;
  ~StepProfiler();

  // Around optimizer step `step` (1-based).
  void before_step(int64_t step, const at::Device& device);
  void after_step(int64_t step, const at::Device& device);

 private:
  void start(const at::Device& device);
  void stop(const at::Device& device);  // writes the trace
  std::optional<ProfileRequest> request_;
  bool active_ = false;
};

}  // namespace mxablate::trainer
