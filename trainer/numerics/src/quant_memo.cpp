#include "mxablate/trainer/numerics/quant_memo.h"

#include "mxablate/trainer/plan/linear_plan.h"

#include <tuple>
#include <utility>

namespace mxablate::trainer {

bool QuantMemo::memoizable(const kernels::QuantSpec& spec) { return is_memoizable(spec); }

QuantMemo::Slot* QuantMemo::slot_of(uint64_t epoch, const at::Tensor& x) {
  // Inference tensors keep no version counter: they are never memoized.
  if (epoch != epoch_ || !x.defined() || !x.has_storage() || x.is_inference()) return nullptr;
  for (Slot& slot : slots_) {
    const at::Tensor& in = slot.input;
    if (x.storage().unsafeGetStorageImpl() == in.storage().unsafeGetStorageImpl() &&
        x.storage_offset() == in.storage_offset() && x.sizes() == in.sizes() && x.strides() == in.strides() &&
        x.scalar_type() == in.scalar_type() && x._version() == slot.version)
      return &slot;
  }
  return nullptr;
}

std::optional<QuantMemo::Result> QuantMemo::lookup(uint64_t epoch, const at::Tensor& x, kernels::Axis axis,
                                                   const kernels::QuantSpec& spec,
                                                   kernels::QuantizedOperand::Form form, at::ScalarType dtype,
                                                   bool need_telemetry, bool erase) {
  if (!enabled || !reuses(spec)) return std::nullopt;
  std::lock_guard<std::mutex> lock(mutex_);
  Slot* slot = slot_of(epoch, x);
  if (slot == nullptr) return std::nullopt;
  for (auto e = slot->entries.begin(); e != slot->entries.end(); ++e) {
    if (e->axis != axis || e->form != form || e->dtype != dtype || !same_quantization(e->spec, spec)) continue;
    if (need_telemetry && !e->result.telemetry) return std::nullopt;
    ++hits_;
    Result found = e->result;
    if (erase) {
      slot->entries.erase(e);
      if (slot->entries.empty()) slots_.erase(slots_.begin() + (slot - slots_.data()));
    }
    return found;
  }
  return std::nullopt;
}

std::optional<QuantMemo::Result> QuantMemo::find(uint64_t epoch, const at::Tensor& x, kernels::Axis axis,
                                                 const kernels::QuantSpec& spec,
                                                 kernels::QuantizedOperand::Form form, at::ScalarType dtype,
                                                 bool need_telemetry) {
  return lookup(epoch, x, axis, spec, form, dtype, need_telemetry, /*erase=*/false);
}

std::optional<QuantMemo::Result> QuantMemo::take(uint64_t epoch, const at::Tensor& x, kernels::Axis axis,
                                                 const kernels::QuantSpec& spec,
                                                 kernels::QuantizedOperand::Form form, at::ScalarType dtype,
                                                 bool need_telemetry) {
  return lookup(epoch, x, axis, spec, form, dtype, need_telemetry, /*erase=*/true);
}

void QuantMemo::store(uint64_t epoch, const at::Tensor& x, kernels::Axis axis, const kernels::QuantSpec& spec,
                      kernels::QuantizedOperand::Form form, at::ScalarType dtype, Result result) {
  if (!enabled || !reuses(spec) || !x.defined() || !x.has_storage() || x.is_inference()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (epoch != epoch_) {
    clear_locked();
    epoch_ = epoch;
  }
  Slot* slot = slot_of(epoch, x);
  if (slot == nullptr) {
    if (slots_.size() >= capacity_) slots_.erase(slots_.begin());
    slots_.push_back(Slot{x, x._version(), {}});
    slot = &slots_.back();
  }
  for (Entry& e : slot->entries) {
    if (e.axis == axis && e.form == form && e.dtype == dtype && same_quantization(e.spec, spec)) {
      e.result = std::move(result);  // now with telemetry
      return;
    }
  }
  slot->entries.push_back({axis, spec, form, dtype, std::move(result)});
}

void QuantMemo::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  clear_locked();
}

void QuantMemo::clear_locked() { slots_.clear(); }

int64_t QuantMemo::hits() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return hits_;
}

}  // namespace mxablate::trainer
