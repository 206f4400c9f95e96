// mxablate-bench's section on the fused common-path ops (kernels/README.md): each op's forward
// and backward at the llama-125m layer shapes, in GB/s of the bytes it must move and against the
// unfused LibTorch ops it replaces (their forward; autograd's backward through them).
#pragma once

#include <functional>
#include <sstream>
#include <string>

namespace mxablate::bench {

// v with `digits` digits after the point (the benchmark's tables).
inline std::string fixed(double v, int digits) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(digits);
  s << v;
  return s.str();
}

struct FusedBenchContext {
  std::function<double(const std::function<void()>&)> median_ms;  // time of one call on the GPU
  std::function<void(const std::string&)> line;                    // one line of the report
  double copy_gbs = 0;                                             // the copy ceiling
  bool quick = false;
};

void fused_ops_bench(const FusedBenchContext& c);

}  // namespace mxablate::bench
