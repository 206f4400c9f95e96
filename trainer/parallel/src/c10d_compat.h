// What differs in torch.distributed's C++ API (c10d) between the LibTorch versions the trainer
// builds against: in 1.13 the Gloo and NCCL process groups derive from c10d::ProcessGroup, from
// 2.0 on from c10d::Backend. Which backends this build has is decided by
// trainer/torch/CMakeLists.txt: MXABLATE_WITH_GLOO (Gloo's headers found) and MXABLATE_WITH_NCCL
// (a CUDA LibTorch and nccl.h found); each also defines the USE_C10D_* macro its header wants.
#pragma once

#include <torch/version.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#endif

#if MXABLATE_WITH_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#if MXABLATE_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace mxablate::trainer::compat {

#if TORCH_VERSION_MAJOR >= 2
using CollectiveBackend = c10d::Backend;
#else
using CollectiveBackend = c10d::ProcessGroup;
#endif

inline constexpr bool kHasGloo = MXABLATE_WITH_GLOO != 0;
inline constexpr bool kHasNccl = MXABLATE_WITH_NCCL != 0;

}  // namespace mxablate::trainer::compat
