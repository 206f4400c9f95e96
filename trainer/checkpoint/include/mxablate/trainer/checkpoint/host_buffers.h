// Host copies of device tensors for a checkpoint's snapshot (docs/design.md §4, "Checkpoints and
// exact resume"): the training thread copies every tensor a checkpoint holds into host memory and
// synchronizes once; the checkpoint writer then serializes the copies on its own thread while
// training changes the originals. The buffers are kept from one checkpoint to the next (pinned
// where the tensors are on CUDA, so the copies are DMA transfers), and one is freed only when a
// snapshot no longer asks for it.
//
// A copy keeps its tensor's storage layout: serialization writes whole storages (a sharded run's
// parameters are views into one bucket buffer), so each device storage gets one host storage of
// its size, and every tensor on it becomes a tensor with the same sizes, strides and offset on the
// host storage. An archive of the copies then holds the same storages, records and metadata as an
// archive of the originals; only the recorded storage location is "cpu" where the originals were
// on a GPU (loading maps every tensor to the run's device, so nothing reads it). LibTorch's pickler
// also memoizes a tensor only when something besides the archive holds it (it looks at the use
// count), so the copies are held here until the next snapshot, as the model and the optimizer
// hold the originals, and buffer() hands out tensors that only their user holds, as the
// temporaries written before were.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <unordered_map>
#include <vector>

namespace mxablate::trainer {

class HostBuffers {
 public:
  // Starts a snapshot. Nothing copied before end() may be read until then.
  void begin();
  // A host tensor that holds `src`'s values after end(): same dtype, sizes, strides and storage
  // offset, on a host copy of src's whole storage (copied once per snapshot however many tensors
  // share it). requires_grad is src's, as serialization records it.
  at::Tensor copy_of(const at::Tensor& src);
  // A contiguous host buffer of `numel` elements of `dtype`, named `key` (for values a snapshot
  // assembles itself), pinned when `pinned`; its previous contents are undefined. The tensor
  // returned is a new one on the kept storage, held by nobody else.
  at::Tensor buffer(const std::string& key, int64_t numel, at::ScalarType dtype, bool pinned);
  // Waits for the copies (one synchronization of `device`) and frees the buffers this snapshot
  // did not use.
  void end(const at::Device& device);

  int64_t bytes() const;  // held now

 private:
  struct Entry {
    at::Tensor flat;  // 1-D, contiguous, the whole storage
    bool pinned = false;
    bool used = false;
  };
  static bool fits(const Entry& e, int64_t numel, at::ScalarType dtype, bool pinned);
  std::unordered_map<const void*, Entry> storages_;  // by the device storage copied into them
  std::unordered_map<std::string, Entry> named_;
  std::vector<at::Tensor> copies_;  // copy_of's, held until the next snapshot begins
};

}  // namespace mxablate::trainer
