#include "mxablate/trainer/quant_memo.h"

#include "mxablate/trainer/linear_plan.h"

#include <tuple>
#include <utility>

namespace mxablate::trainer {

bool QuantMemo::memoizable(const kernels::QuantSpec& spec) { return is_memoizable(spec); }

bool QuantMemo::holds(uint64_t epoch, const at::Tensor& x) const {
  // Inference tensors keep no version counter: they are never memoized.
  if (!input_.defined() || epoch != epoch_ || !x.defined() || !x.has_storage() || x.is_inference())
    return false;
  return x.storage().unsafeGetStorageImpl() == input_.storage().unsafeGetStorageImpl() &&
         x.storage_offset() == input_.storage_offset() && x.sizes() == input_.sizes() &&
         x.strides() == input_.strides() && x.scalar_type() == input_.scalar_type() &&
         x._version() == version_;
}

std::optional<QuantMemo::Result> QuantMemo::find(uint64_t epoch, const at::Tensor& x,
                                                 kernels::Axis axis, const kernels::QuantSpec& spec,
                                                 kernels::QuantizedOperand::Form form, at::ScalarType dtype,
                                                 bool need_telemetry) {
  if (!enabled || !reuses(spec)) return std::nullopt;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!holds(epoch, x)) return std::nullopt;
  for (const Entry& e : entries_) {
    if (e.axis != axis || e.form != form || e.dtype != dtype || !same_quantization(e.spec, spec)) continue;
    if (need_telemetry && !e.result.telemetry) return std::nullopt;
    ++hits_;
    return e.result;
  }
  return std::nullopt;
}

void QuantMemo::store(uint64_t epoch, const at::Tensor& x, kernels::Axis axis, const kernels::QuantSpec& spec,
                      kernels::QuantizedOperand::Form form, at::ScalarType dtype, Result result) {
  if (!enabled || !reuses(spec) || !x.defined() || !x.has_storage() || x.is_inference()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!holds(epoch, x)) {
    clear_locked();
    epoch_ = epoch;
    input_ = x;
    version_ = x._version();
  }
  for (Entry& e : entries_) {
    if (e.axis == axis && e.form == form && e.dtype == dtype && same_quantization(e.spec, spec)) {
      e.result = std::move(result);  // now with telemetry
      return;
    }
  }
  entries_.push_back({axis, spec, form, dtype, std::move(result)});
}

void QuantMemo::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  clear_locked();
}

void QuantMemo::clear_locked() {
  entries_.clear();
  input_ = at::Tensor();
  version_ = 0;
}

int64_t QuantMemo::hits() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return hits_;
}

}  // namespace mxablate::trainer
