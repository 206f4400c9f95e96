// The named model presets (DESIGN §4) as plain shapes, torch-free, so that the orchestrator can
// reject a recipe whose quantization cannot fit the model's GEMMs *before* anything runs, and the
// trainer builds exactly the shapes that were checked.
//
// Every transformer block has seven linears, Y = X Wᵀ with W of shape (out, in):
//   q (d_model → n_heads·head_dim), k and v (d_model → n_kv_heads·head_dim),
//   o (n_heads·head_dim → d_model), gate and up (d_model → ffn_hidden), down (ffn_hidden → d_model).
// Fprop reduces over `in`, Dgrad over `out`, Wgrad over the tokens of a micro-batch (DESIGN §1).
// The vocabulary size comes from the data (the tokenizer), not from the preset.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mxablate/contract/run_config.h"

namespace mxablate::contract {

struct ModelShape {
  std::string_view name;
  int64_t d_model;
  int64_t n_layers;
  int64_t n_heads;
  int64_t n_kv_heads;
  int64_t ffn_hidden;

  int64_t head_dim() const { return d_model / n_heads; }
  int64_t kv_dim() const { return n_kv_heads * head_dim(); }
  // Parameters of the blocks and the untied embedding + LM head, norms included.
  int64_t parameters(int64_t vocab) const;
};

std::span<const ModelShape> model_shapes();
const ModelShape* find_model_shape(std::string_view name);
std::string model_shape_names();  // "smoke, llama-5m, …" for error messages

// The distinct reduction lengths a GEMM sees in one block of `shape` (Fprop: in features, Dgrad:
// out features); Wgrad's is the micro-batch token count and is not a property of the model.
std::vector<int64_t> fprop_reduction_dims(const ModelShape& shape);
std::vector<int64_t> dgrad_reduction_dims(const ModelShape& shape);

// Checks that `c` can run on its model preset: the model exists, every quantized GEMM's block
// size and every rotated GEMM's Hadamard size divide that GEMM's reduction lengths, and the
// BF16-kept blocks exist. Throws ConfigError("key.path: why") naming the key that decides it.
void check_model_fit(const RunConfig& c);

}  // namespace mxablate::contract
