// Presets: names, sizes in the ranges docs/design.md §4 promises, and shapes that MXFP4 can block.
#include "catch.h"
#include "mxablate/trainer/model_presets.h"

using namespace mxablate::trainer;

TEST_CASE("Presets span smoke to the 8B shape with the promised sizes", "[trainer][presets]") {
  const auto size = [](const char* name) {
    const auto p = find_model_preset(name);
    REQUIRE(p);
    return parameter_count(*p, p->vocab_size > 0 ? p->vocab_size : 4096);
  };
  CHECK(size("smoke") < 1000000);
  CHECK(size("llama-5m") == Approx(5.2e6).epsilon(0.1));
  CHECK(size("llama-20m") == Approx(20e6).epsilon(0.15));
  CHECK(size("llama-85m") == Approx(85e6).epsilon(0.1));
  CHECK(size("llama-125m") == Approx(125e6).epsilon(0.1));
  CHECK(size("llama-8b") == 8030261248LL);  // Llama 3.1 8B exactly
  CHECK_FALSE(find_model_preset("llama-7b"));
  CHECK(model_preset_names().find("llama-20m") != std::string::npos);
}

TEST_CASE("Every preset's linear widths are multiples of the MXFP4 block", "[trainer][presets]") {
  for (const auto& p : model_presets()) {
    INFO(p.name);
    CHECK(p.n_heads % p.n_kv_heads == 0);
    CHECK(p.head_dim() % 2 == 0);
    for (const auto& l : linear_layers(p, 4096)) {
      CHECK(l.in_features % 32 == 0);
      CHECK(l.out_features % 32 == 0);
    }
  }
  const auto layers = linear_layers(*find_model_preset("smoke"), 512);
  REQUIRE(layers.size() == 2 * 7 + 1);
  CHECK(layers[1].name == "blocks.0.attn.k");
  CHECK(layers[1].out_features == 32);  // 2 KV heads x 16
  CHECK(layers[13].name == "blocks.1.mlp.down");
  CHECK(layers[14].name == "lm_head");
  CHECK(layers[14].block == -1);
}
