#include "mxablate/trainer/plan/model_presets.h"

namespace mxablate::trainer {

const std::vector<ModelShape>& model_presets() {
  // Widths are multiples of 32 (MXFP4 blocks) and, from llama-5m up, of 128 (any Hadamard size);
  // FFN widths about 8/3 d rounded up to a multiple of 128 (Llama's SwiGLU proportion). Sizes in
  // the names hold at the vocabulary in `nominal_vocab` (tests/trainer/plan/model_presets_test.cpp
  // keeps every name within 15 %); README.md lists the counts at 4096 and 32768.
  // name, d_model, n_layers, n_heads, n_kv_heads, ffn_hidden, rope_theta, norm_eps, nominal_vocab,
  // note
  static const std::vector<ModelShape> presets = {
      {"smoke", 64, 2, 4, 2, 192, 10000, 1e-5, 0,
       "CPU smoke test: ~0.6 M parameters (0.1 M outside the embeddings)"},
      {"llama-5m", 256, 4, 8, 4, 768, 10000, 1e-5, 4096, "~5.2 M parameters"},
      {"llama-20m", 512, 6, 8, 4, 1408, 10000, 1e-5, 4096, "~22 M parameters"},
      {"llama-85m", 768, 12, 12, 4, 2048, 10000, 1e-5, 4096, "~82 M parameters"},
      {"llama-125m", 768, 12, 12, 12, 3072, 10000, 1e-5, 4096, "~120 M parameters"},
      {"llama-350m", 1024, 24, 16, 16, 2816, 10000, 1e-5, 32768,
       "~375 M parameters at a 32768-token vocabulary (308 M outside the embeddings)"},
      {"llama-760m", 1536, 24, 16, 16, 4096, 10000, 1e-5, 32768,
       "~780 M parameters at a 32768-token vocabulary (680 M outside the embeddings)"},
      {"llama-1.3b", 2048, 24, 16, 16, 5504, 10000, 1e-5, 32768,
       "~1.35 B parameters at a 32768-token vocabulary (1.21 B outside the embeddings)"},
      {"llama-8b", 4096, 32, 32, 8, 14336, 500000, 1e-5, 128256,
       "Llama 3.1 8B: 8.03 B parameters at Llama 3's 128256-token vocabulary"},
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

ModelShape shape_from_dims(const std::string& label, int64_t d_model, int64_t n_layers,
                           int64_t n_heads, int64_t n_kv_heads, int64_t ffn_hidden,
                           double rope_theta, double norm_eps) {
  ModelShape s;
  s.name = label;
  s.d_model = d_model;
  s.n_layers = n_layers;
  s.n_heads = n_heads;
  s.n_kv_heads = n_kv_heads;
  s.ffn_hidden = ffn_hidden;
  s.rope_theta = rope_theta;
  s.norm_eps = norm_eps;
  return s;
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

// Per block: four attention projections, three MLP projections, two RMSNorms; one final norm.
// Computed from the widths, not by listing layers, so a deep custom shape costs nothing here.
int64_t non_embedding_parameter_count(const ModelShape& s) {
  const int64_t attention = 2 * s.d_model * s.d_model + 2 * s.d_model * s.kv_dim();
  const int64_t mlp = 3 * s.d_model * s.ffn_hidden;
  return s.n_layers * (attention + mlp + 2 * s.d_model) + s.d_model;
}

int64_t parameter_count(const ModelShape& s, int64_t vocab_size) {
  return non_embedding_parameter_count(s) + embedding_parameter_count(s, vocab_size);
}

}  // namespace mxablate::trainer
