#include "step_profiler.h"

#include <torch/csrc/autograd/profiler_kineto.h>

#include <charconv>
#include <filesystem>
#include <set>
#include <stdexcept>

#include "mxablate/contract/run_config.h"
#include "mxablate/trainer/torch/libtorch_compat.h"

namespace mxablate::trainer {
namespace {

namespace kineto = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

std::optional<int64_t> parse_step(std::string_view s) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < 1) return std::nullopt;
  return v;
}

std::set<ActivityType> activities(const at::Device& device) {
  std::set<ActivityType> a{ActivityType::CPU};
  if (device.is_cuda()) a.insert(ActivityType::CUDA);
  return a;
}

}  // namespace

std::optional<ProfileRequest> parse_profile_steps(const std::string& steps, std::string trace_path) {
  const size_t colon = steps.find(':');
  const auto first = parse_step(std::string_view(steps).substr(0, colon));
  const auto last = colon == std::string::npos ? first
                                               : parse_step(std::string_view(steps).substr(colon + 1));
  if (!first || !last || *last < *first) return std::nullopt;
  return ProfileRequest{*first, *last, std::move(trace_path)};
}

StepProfiler::StepProfiler(std::optional<ProfileRequest> request, const at::Device& device)
    : request_(std::move(request)) {
  if (!request_) return;
  start(device);
  stop(device);
}

StepProfiler::~StepProfiler() {
  if (!active_) return;
  try {
    kineto::disableProfiler();  // a run that ended inside the window: the trace is dropped
  } catch (...) {
  }
}

void StepProfiler::before_step(int64_t step, const at::Device& device) {
  if (request_ && !active_ && step == request_->first_step) start(device);
}

void StepProfiler::after_step(int64_t step, const at::Device& device) {
  if (active_ && step == request_->last_step) stop(device);
}

void StepProfiler::start(const at::Device& device) {
  try {
    const ProfilerConfig config(ProfilerState::KINETO);
    kineto::prepareProfiler(config, activities(device));
    kineto::enableProfiler(config, activities(device));
  } catch (const c10::Error& e) {
    throw contract::ConfigError("--profile-steps: this LibTorch (" + std::string(compat::torch_version()) +
                             ") cannot profile: " + e.what_without_backtrace());
  }
  active_ = true;
}

void StepProfiler::stop(const at::Device& device) {
  compat::synchronize(device);  // the window's kernels have finished before the trace closes
  std::unique_ptr<kineto::ProfilerResult> result = kineto::disableProfiler();
  active_ = false;
  const std::filesystem::path path(request_->trace_path);
  try {
    result->save(path.string());
  } catch (const c10::Error& e) {
    throw contract::ConfigError("--profile-trace: cannot write " + path.string() + ": " +
                             e.what_without_backtrace());
  }
}

}  // namespace mxablate::trainer
