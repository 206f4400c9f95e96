#include "mxablate/trainer/numerics/weight_gradient.h"

#include <mutex>
#include <unordered_map>

namespace mxablate::trainer {
namespace {

// One table for the process: the ranks of an in-process test are threads with their own weights.
struct Sinks {
  std::mutex mutex;
  std::unordered_map<const c10::TensorImpl*, std::shared_ptr<const WeightGradientSink>> by_weight;
};

Sinks& sinks() {
  static Sinks s;
  return s;
}

}  // namespace

void attach_weight_gradient_sink(const at::Tensor& weight, WeightGradientSink sink) {
  Sinks& s = sinks();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.by_weight[weight.unsafeGetTensorImpl()] = std::make_shared<const WeightGradientSink>(std::move(sink));
}

void detach_weight_gradient_sink(const at::Tensor& weight) {
  Sinks& s = sinks();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.by_weight.erase(weight.unsafeGetTensorImpl());
}

std::shared_ptr<const WeightGradientSink> weight_gradient_sink(const at::Tensor& weight) {
  Sinks& s = sinks();
  std::lock_guard<std::mutex> lock(s.mutex);
  const auto it = s.by_weight.find(weight.unsafeGetTensorImpl());
  return it == s.by_weight.end() ? nullptr : it->second;
}

}  // namespace mxablate::trainer
