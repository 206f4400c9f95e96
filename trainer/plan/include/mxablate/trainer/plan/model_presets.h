// Named model shapes (docs/design.md §4): Llama 3.1 architecture (RMSNorm, RoPE, SwiGLU, grouped-query
// attention, no biases, untied embeddings) from a CPU-smoke size to the 8B shape of the reference
// paper ("Pretraining Large Language Models with MXFP4 on Native FP4 Hardware", docs/design.md §1).
// The vocabulary comes from the prepared data (llama-8b's name holds at Llama 3's 128256 tokens,
// the vocabulary of the MLPerf C4 data it is trained on). A run config may also give a shape key by key
// (contract::ModelDims); run_fit.h resolves either to a ModelShape and checks it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mxablate::trainer {

struct ModelShape {
  std::string name;
  int64_t d_model = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t ffn_hidden = 0;
  double rope_theta = 10000;
  double norm_eps = 1e-5;
  // The vocabulary at which the size in a preset's name holds (llama-20m: ~20 M parameters at
  // the default corpus's 4096 tokens; llama-1.3b: at 32768); 0 for a name without a size.
  int64_t nominal_vocab = 0;
  std::string note;

  int64_t head_dim() const { return d_model / n_heads; }
  int64_t kv_dim() const { return n_kv_heads * head_dim(); }
};

const std::vector<ModelShape>& model_presets();
std::optional<ModelShape> find_model_preset(std::string_view name);
std::string model_preset_names();  // "smoke, llama-5m, …"
// A custom shape as a ModelShape, named by contract::model_label.
ModelShape shape_from_dims(const std::string& label, int64_t d_model, int64_t n_layers,
                           int64_t n_heads, int64_t n_kv_heads, int64_t ffn_hidden,
                           double rope_theta, double norm_eps);

// One transformer linear (an MXLinear) or the LM head, in model order. Its position in
// linear_layers() is the `layer` of its RNG keys and telemetry.
struct LinearShape {
  std::string name;  // e.g. "blocks.0.attn.q", "lm_head"
  int64_t in_features = 0;
  int64_t out_features = 0;
  int block = -1;  // transformer block index; -1 for the LM head
};
std::vector<LinearShape> linear_layers(const ModelShape& shape, int64_t vocab_size);

int64_t parameter_count(const ModelShape& shape, int64_t vocab_size);
int64_t embedding_parameter_count(const ModelShape& shape, int64_t vocab_size);  // embed + head
// Everything outside the embeddings: what is known before the vocabulary is.
int64_t non_embedding_parameter_count(const ModelShape& shape);

}  // namespace mxablate::trainer
