#include "mxablate/trainer/checkpoint/host_buffers.h"

#include <c10/core/GradMode.h>

#include <stdexcept>

#include "mxablate/trainer/torch/libtorch_compat.h"

namespace mxablate::trainer {
namespace {

at::Tensor allocate(int64_t numel, at::ScalarType dtype, bool pinned) {
  return at::empty({numel}, at::TensorOptions().dtype(dtype).device(at::kCPU).pinned_memory(pinned));
}

}  // namespace

bool HostBuffers::fits(const Entry& e, int64_t numel, at::ScalarType dtype, bool pinned) {
  return e.flat.defined() && e.flat.numel() == numel && e.flat.scalar_type() == dtype && e.pinned == pinned;
}

void HostBuffers::begin() {
  copies_.clear();
  for (auto& [key, e] : storages_) e.used = false;
  for (auto& [key, e] : named_) e.used = false;
}

at::Tensor HostBuffers::copy_of(const at::Tensor& src) {
  const at::Storage& storage = src.storage();
  const int64_t item = static_cast<int64_t>(src.element_size());
  const int64_t nbytes = static_cast<int64_t>(storage.nbytes());
  if (nbytes % item != 0)
    throw std::logic_error("checkpoint snapshot: a storage of " + std::to_string(nbytes) +
                           " bytes does not hold whole elements of " + std::to_string(item));
  const int64_t numel = nbytes / item;
  const bool pinned = src.is_cuda();
  Entry& e = storages_[storage.unsafeGetStorageImpl()];
  if (e.used && e.flat.scalar_type() != src.scalar_type())
    throw std::logic_error("checkpoint snapshot: tensors of two dtypes share a storage");
  if (!e.used) {
    if (!fits(e, numel, src.scalar_type(), pinned)) {
      e.flat = allocate(numel, src.scalar_type(), pinned);
      e.pinned = pinned;
    }
    c10::NoGradGuard no_grad;
    const at::Tensor whole = at::empty({0}, src.options()).set_(storage, 0, {numel}, {1});
    e.flat.copy_(whole, /*non_blocking=*/pinned);
    e.used = true;
  }
  at::Tensor copy = at::empty({0}, e.flat.options()).set_(e.flat.storage(), src.storage_offset(), src.sizes(),
                                                           src.strides());
  if (src.requires_grad()) copy.set_requires_grad(true);
  copies_.push_back(copy);
  return copy;
}

at::Tensor HostBuffers::buffer(const std::string& key, int64_t numel, at::ScalarType dtype, bool pinned) {
  Entry& e = named_[key];
  if (!fits(e, numel, dtype, pinned)) {
    e.flat = allocate(numel, dtype, pinned);
    e.pinned = pinned;
  }
  e.used = true;
  return at::empty({0}, e.flat.options()).set_(e.flat.storage(), 0, {numel}, {1});
}

void HostBuffers::end(const at::Device& device) {
  compat::synchronize(device);
  for (auto it = storages_.begin(); it != storages_.end();) it = it->second.used ? std::next(it) : storages_.erase(it);
  for (auto it = named_.begin(); it != named_.end();) it = it->second.used ? std::next(it) : named_.erase(it);
}

int64_t HostBuffers::bytes() const {
  int64_t n = 0;
  for (const auto& [key, e] : storages_) n += static_cast<int64_t>(e.flat.nbytes());
  for (const auto& [key, e] : named_) n += static_cast<int64_t>(e.flat.nbytes());
  return n;
}

}  // namespace mxablate::trainer
