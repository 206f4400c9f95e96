#include "mxablate/contract/model_shapes.h"

#include <algorithm>
#include <array>
#include <fmt/format.h>

namespace mxablate::contract {
namespace {

// Sizes chosen so that every dimension is a multiple of 32 (an MXFP4 block) and, from llama-5m
// up, of 128 (the largest Hadamard size); the smoke model is deliberately tiny (64-wide).
constexpr std::array<ModelShape, 6> kShapes{{
    {"smoke", 64, 2, 4, 2, 192},
    {"llama-5m", 256, 4, 4, 2, 768},
    {"llama-20m", 384, 10, 6, 2, 1024},
    {"llama-85m", 768, 12, 12, 4, 2048},
    {"llama-125m", 1024, 10, 16, 4, 2816},
    {"llama-8b", 4096, 32, 32, 8, 14336},  // Llama 3.1-8B; for shape checks
}};

void add_unique(std::vector<int64_t>& v, int64_t x) {
  if (std::find(v.begin(), v.end(), x) == v.end()) v.push_back(x);
}

int block_elements(const std::string& precision) {
  if (precision == "mxfp4") return 32;
  if (precision == "nvfp4") return 16;
  return 0;  // bf16, fp8: per-tensor or no scaling, any length fits
}

int64_t micro_batch_tokens(const RunConfig& c) {
  return c.train.micro_batch_tokens > 0 ? c.train.micro_batch_tokens : c.train.global_batch_tokens;
}

}  // namespace

int64_t ModelShape::parameters(int64_t vocab) const {
  const int64_t attn = d_model * (n_heads * head_dim()) * 2 + d_model * kv_dim() * 2;
  const int64_t mlp = 3 * d_model * ffn_hidden;
  const int64_t norms = 2 * d_model;
  return n_layers * (attn + mlp + norms) + 2 * vocab * d_model + d_model;
}

std::span<const ModelShape> model_shapes() { return kShapes; }

const ModelShape* find_model_shape(std::string_view name) {
  for (const auto& s : kShapes)
    if (s.name == name) return &s;
  return nullptr;
}

std::string model_shape_names() {
  std::string out;
  for (const auto& s : kShapes) out += (out.empty() ? "" : ", ") + std::string(s.name);
  return out;
}

std::vector<int64_t> fprop_reduction_dims(const ModelShape& s) {
  std::vector<int64_t> dims;
  add_unique(dims, s.d_model);                 // q, k, v, gate, up
  add_unique(dims, s.n_heads * s.head_dim());  // o
  add_unique(dims, s.ffn_hidden);              // down
  return dims;
}

std::vector<int64_t> dgrad_reduction_dims(const ModelShape& s) {
  std::vector<int64_t> dims;
  add_unique(dims, s.n_heads * s.head_dim());  // q
  add_unique(dims, s.kv_dim());                // k, v
  add_unique(dims, s.d_model);                 // o, down
  add_unique(dims, s.ffn_hidden);              // gate, up
  return dims;
}

void check_model_fit(const RunConfig& c) {
  const ModelShape* shape = find_model_shape(c.model);
  if (!shape)
    throw ConfigError(fmt::format("model: expected one of {}, got \"{}\"", model_shape_names(),
                                  c.model));
  const int64_t tokens = micro_batch_tokens(c);
  struct Gemm {
    const char* name;
    const std::string* precision;
    std::vector<int64_t> dims;
    const char* reduces_over;
  };
  const std::array<Gemm, 3> gemms{{
      {"fprop", &c.precision.fprop, fprop_reduction_dims(*shape), "in-features"},
      {"dgrad", &c.precision.dgrad, dgrad_reduction_dims(*shape), "out-features"},
      {"wgrad", &c.precision.wgrad, {tokens}, "micro-batch tokens"},
  }};
  for (const Gemm& g : gemms) {
    const int block = block_elements(*g.precision);
    if (block == 0) continue;
    for (int64_t d : g.dims)
      if (d % block != 0)
        throw ConfigError(fmt::format(
            "precision.{}: {} needs its reduction length to be a multiple of {}, but {} of "
            "model {} has {} of {}",
            g.name, *g.precision, block, g.name, c.model, g.reduces_over, d));
  }
  if (c.quant.hadamard.mode != "none") {
    const int h = c.quant.hadamard.size;
    for (const std::string& name : c.quant.hadamard.gemms)
      for (const Gemm& g : gemms)
        if (name == g.name)
          for (int64_t d : g.dims)
            if (d % h != 0)
              throw ConfigError(fmt::format(
                  "quant.hadamard.size: a {}-point rotation on {} needs reduction lengths that "
                  "are multiples of {}, but model {} has {} of {}",
                  h, g.name, h, c.model, g.reduces_over, d));
  }
  if (c.quant.bf16_first_blocks + c.quant.bf16_last_blocks > shape->n_layers)
    throw ConfigError(fmt::format(
        "quant.bf16_first_blocks: {} first + {} last BF16 blocks exceed the {} blocks of model {}",
        c.quant.bf16_first_blocks, c.quant.bf16_last_blocks, shape->n_layers, c.model));
}

}  // namespace mxablate::contract
