// The configs the memory-plan tests plan (memory_plan_test.cpp, recompute_plan_test.cpp): the
// reference paper's 8B shape, whose every part memory_plan_test computes by hand.
#pragma once

#include <cstdint>

#include "mxablate/contract/run_config.h"

namespace mxablate::test {

inline constexpr int64_t kVocab8b = 128256;  // Llama 3's

// The 8B shape (d 4096, 32 layers, 32/8 heads, FFN 14336) at seq 8192, one sequence per
// micro-batch, 16 micro-batches a step over 4 ranks, BF16 GEMMs on CUDA.
inline contract::RunConfig eight_b() {
  contract::RunConfig c;
  c.model = contract::ModelChoice::shaped(contract::ModelDims{4096, 32, 32, 8, 14336});
  c.data.seq_len = 8192;
  c.train.global_batch_tokens = 16 * 8192;
  c.train.micro_batch_tokens = 8192;
  c.parallel.data = 4;
  c.device = contract::Device::kCUDA;
  return c;
}

}  // namespace mxablate::test
