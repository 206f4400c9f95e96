#include "mxablate/trainer/model_presets.h"

namespace mxablate::trainer {

const std::vector<ModelShape>& model_presets() {
  // Widths are multiples of 32 (MXFP4 blocks) and, from llama-5m up, of 128 (any Hadamard size).
  // Parameter counts in the notes are at the default corpus's 4096-token vocabulary.
  static const std::vector<ModelShape> presets = {
      {"smoke", 64, 2, 4, 2, 192, 0, 10000, 1e-5, false,
       "CPU smoke test: ~0.6 M parameters (0.1 M outside the embeddings)"},
      {"llama-5m", 256, 4, 8, 4, 768, 0, 10000, 1e-5, false, "~5.2 M parameters"},
      {"llama-20m", 512, 6, 8, 4, 1408, 0, 10000, 1e-5, false, "~22 M parameters"},
      {"llama-85m", 768, 12, 12, 4, 2048, 0, 10000, 1e-5, false, "~82 M parameters"},
      {"llama-125m", 768, 12, 12, 12, 3072, 0, 10000, 1e-5, false, "~120 M parameters"},
      {"llama-8b", 4096, 32, 32, 8, 14336, 128256, 500000, 1e-5, true,
       "Llama 3.1 8B shape (8.03 B parameters with its 128256 vocabulary); shape checks only"},
  };
  return presets;
}

std::optional<ModelShape> find_model_preset(std::string_view name) {
  for (const auto& p : model_presets())
    if (p.name == name) return p;
  return std::nullopt;
}

std::string model_preset_names() {
  std::string names;
  for (const auto& p : model_presets()) names += (names.empty() ? "" : ", ") + p.name;
  return names;
}

std::vector<LinearShape> linear_layers(const ModelShape& s, int64_t vocab_size) {
  std::vector<LinearShape> layers;
  for (int64_t b = 0; b < s.n_layers; ++b) {
    const std::string p = "blocks." + std::to_string(b) + ".";
    const int blk = static_cast<int>(b);
    layers.push_back({p + "attn.q", s.d_model, s.d_model, blk});
    layers.push_back({p + "attn.k", s.d_model, s.kv_dim(), blk});
    layers.push_back({p + "attn.v", s.d_model, s.kv_dim(), blk});
    layers.push_back({p + "attn.o", s.d_model, s.d_model, blk});
    layers.push_back({p + "mlp.gate", s.d_model, s.ffn_hidden, blk});
    layers.push_back({p + "mlp.up", s.d_model, s.ffn_hidden, blk});
    layers.push_back({p + "mlp.down", s.ffn_hidden, s.d_model, blk});
  }
  layers.push_back({"lm_head", s.d_model, vocab_size, -1});
  return layers;
}

int64_t embedding_parameter_count(const ModelShape& s, int64_t vocab_size) {
  return 2 * vocab_size * s.d_model;
}

int64_t parameter_count(const ModelShape& s, int64_t vocab_size) {
  int64_t total = vocab_size * s.d_model;  // token embedding
  for (const auto& l : linear_layers(s, vocab_size)) total += l.in_features * l.out_features;
  total += s.n_layers * 2 * s.d_model + s.d_model;  // two RMSNorms per block, one final
  return total;
}

}  // namespace mxablate::trainer
