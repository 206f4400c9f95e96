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

// The innermost open WeightGradientSum of this thread (autograd runs a reader's nested backward,
// the chunked loss's per chunk, on the thread that runs the reader's own).
thread_local WeightGradientSum* open_sum = nullptr;

}  // namespace

WeightGradientSum::WeightGradientSum(std::shared_ptr<const WeightGradientSink> sink)
    : sink_(std::move(sink)), outer_(open_sum) {
  open_sum = this;
}

WeightGradientSum::~WeightGradientSum() { open_sum = outer_; }

void give_weight_gradient(const std::shared_ptr<const WeightGradientSink>& sink, const at::Tensor& gradient) {
  for (WeightGradientSum* s = open_sum; s; s = s->outer_) {
    if (s->sink_ != sink) continue;
    s->sum_ = s->sum_.defined() ? s->sum_.add_(gradient) : gradient;
    return;
  }
  (*sink)(gradient);
}

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
