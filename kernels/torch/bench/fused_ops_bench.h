// mxablate-bench's section on the fused common-path ops (kernels/README.md): each op's forward
// and backward at the llama-125m layer shapes, in GB/s of the bytes it must move and against the
// unfused LibTorch ops it replaces (their forward; autograd's backward through them).
#pragma once

#include <functional>
#include <string>

namespace mxablate::bench {

struct FusedBenchContext {
  std::function<double(const std::function<void()>&)> median_ms;  // time of one call on the GPU
  std::function<void(const std::string&)> line;                    // one line of the report
  double copy_gbs = 0;                                             // the copy ceiling
  bool quick = false;
};

void fused_ops_bench(const FusedBenchContext& c);

}  // namespace mxablate::bench
