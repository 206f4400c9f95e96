#include "mxablate/trainer/parallel/data_parallel.h"

#include <chrono>

#include "c10d_compat.h"
#include "mxablate/contract/run_config.h"

namespace mxablate::trainer {
namespace {

using contract::ConfigError;

// Ranks start within seconds of each other; a rank that has not joined after this long is not
// coming (its launcher stops the run when it dies).
constexpr std::chrono::minutes kJoinTimeout{5};
// A collective waits this long for a slow peer (evaluation on rank 0 only, a checkpoint write).
constexpr std::chrono::minutes kCollectiveTimeout{30};

}  // namespace

std::string missing_backend(bool cuda, int ranks) {
  if (cuda && !compat::kHasNccl)
    return "parallel.data: " + std::to_string(ranks) +
           " ranks on CUDA need NCCL, which this build of mxablate-train lacks (nccl.h was not "
           "found when it was configured)";
  if (!cuda && !compat::kHasGloo)
    return "parallel.data: " + std::to_string(ranks) +
           " ranks on the CPU need Gloo, which this build of mxablate-train lacks (Gloo's headers "
           "were not found when it was configured: libgloo-dev)";
  return "";
}

struct DataParallel::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<compat::CollectiveBackend> backend;
#if MXABLATE_WITH_NCCL
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> nccl;
#endif
};

DataParallel::DataParallel(const RankInfo& rank, const at::Device& device)
    : rank_(rank), impl_(std::make_unique<Impl>()) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(rank.store_port);
  options.isServer = rank.hosts_store;
  options.waitWorkers = false;
  options.timeout = kJoinTimeout;
  impl_->store = c10::make_intrusive<c10d::TCPStore>(rank.store_host, options);
  if (device.is_cuda()) {
#if MXABLATE_WITH_NCCL
    auto nccl = c10d::ProcessGroupNCCL::Options::create();
    nccl->timeout = kCollectiveTimeout;
    impl_->nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(impl_->store, rank.rank, rank.world, nccl);
    impl_->backend = impl_->nccl;
#else
    throw ConfigError(missing_backend(true, rank.world));
#endif
  } else {
#if MXABLATE_WITH_GLOO
    auto gloo = c10d::ProcessGroupGloo::Options::create(kCollectiveTimeout);
    gloo->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    impl_->backend = c10::make_intrusive<c10d::ProcessGroupGloo>(impl_->store, rank.rank, rank.world, gloo);
#else
    throw ConfigError(missing_backend(false, rank.world));
#endif
  }
}

DataParallel::~DataParallel() = default;

void DataParallel::close() {
#if MXABLATE_WITH_NCCL && TORCH_VERSION_MAJOR >= 2
  if (impl_->nccl) impl_->nccl->shutdown();
#endif
}

c10::intrusive_ptr<c10d::Work> DataParallel::sum_async(at::Tensor& tensor) {
  std::vector<at::Tensor> tensors{tensor};
  c10d::AllreduceOptions options;
  options.reduceOp = c10d::ReduceOp::SUM;
  return impl_->backend->allreduce(tensors, options);
}

void DataParallel::sum(at::Tensor& tensor) { wait(sum_async(tensor)); }

void DataParallel::max(at::Tensor& tensor) {
  std::vector<at::Tensor> tensors{tensor};
  c10d::AllreduceOptions options;
  options.reduceOp = c10d::ReduceOp::MAX;
  wait(impl_->backend->allreduce(tensors, options));
}

at::Tensor DataParallel::chunk_of(const at::Tensor& bucket) const {
  const int64_t chunk = bucket.numel() / rank_.world;
  return bucket.narrow(0, chunk * rank_.rank, chunk);
}

c10::intrusive_ptr<c10d::Work> DataParallel::reduce_scatter_async(at::Tensor& bucket) {
#if MXABLATE_WITH_NCCL
  if (impl_->nccl) {
    at::Tensor mine = chunk_of(bucket);
    c10d::ReduceScatterOptions options;
    options.reduceOp = c10d::ReduceOp::SUM;
    return impl_->nccl->_reduce_scatter_base(mine, bucket, options);
  }
#endif
  return sum_async(bucket);
}

c10::intrusive_ptr<c10d::Work> DataParallel::all_gather_async(at::Tensor& bucket) {
#if MXABLATE_WITH_NCCL
  if (impl_->nccl) {
    at::Tensor mine = chunk_of(bucket);
    return impl_->nccl->_allgather_base(bucket, mine);
  }
#endif
  // Gloo's list form: each rank's chunk lands in its place of the bucket. The input is a copy:
  // it must not alias the outputs it is gathered into.
  const int64_t chunk = bucket.numel() / rank_.world;
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int r = 0; r < rank_.world; ++r) outputs[0].push_back(bucket.narrow(0, chunk * r, chunk));
  std::vector<at::Tensor> input{chunk_of(bucket).clone()};
  return impl_->backend->allgather(outputs, input);
}

// A collective fails when a peer is gone; say so, not only what the transport saw (the launcher
// names the rank that ended).
void DataParallel::wait(const c10::intrusive_ptr<c10d::Work>& work) {
  bool done = false;
  std::string why = "aborted";
  try {
    done = work->wait();
  } catch (const std::exception& e) {
    why = e.what();
  }
  if (!done)
    throw RanksLost("lost the other ranks (one of them ended or crashed): " +
                             why.substr(0, why.find('\n')));
}

void DataParallel::publish(const std::string& key, const std::string& value) {
  impl_->store->set(key, std::vector<uint8_t>(value.begin(), value.end()));
}

std::string DataParallel::receive(const std::string& key) {
  const std::vector<uint8_t> v = impl_->store->get(key);
  return std::string(v.begin(), v.end());
}

}  // namespace mxablate::trainer
