// Presets: names, sizes in the ranges docs/design.md §4 promises, and shapes that MXFP4 can block.
#include <cstdlib>
#include <string>

#include "catch.h"
#include "mxablate/trainer/plan/model_presets.h"
#include "mxablate/trainer/plan/run_fit.h"

using namespace mxablate::trainer;
using mxablate::contract::ConfigError;
using mxablate::contract::ModelChoice;
using mxablate::contract::ModelDims;

namespace {

// The message of the exception `f` throws ("no exception" when none): Catch2 v2 and v3 spell
// their matchers differently, so tests compare strings.
template <typename F>
std::string message_of(F f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no exception";
}

}  // namespace

namespace {

// The size a preset's name promises ("llama-20m": 20e6, "llama-1.3b": 1.3e9); 0 when the name
// has none.
double nominal_size(const std::string& name) {
  const size_t dash = name.rfind('-');
  if (dash == std::string::npos || name.size() < dash + 3) return 0;
  const char unit = name.back();
  const double scale = unit == 'm' ? 1e6 : unit == 'b' ? 1e9 : 0;
  const std::string digits = name.substr(dash + 1, name.size() - dash - 2);
  char* end = nullptr;
  const double n = std::strtod(digits.c_str(), &end);
  return scale > 0 && end == digits.c_str() + digits.size() ? n * scale : 0;
}

std::string error_of(const ModelShape& s) {
  try {
    check_model_shape(s);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

ModelShape custom(const ModelDims& d) { return model_shape(ModelChoice::shaped(d)); }

}  // namespace

TEST_CASE("Every preset with a size in its name is within 15 % of it", "[trainer][presets]") {
  CHECK(nominal_size("llama-20m") == 20e6);
  CHECK(nominal_size("llama-1.3b") == 1.3e9);
  CHECK(nominal_size("smoke") == 0);
  int sized = 0;
  for (const ModelShape& p : model_presets()) {
    INFO(p.name);
    const double nominal = nominal_size(p.name);
    CHECK((nominal > 0) == (p.nominal_vocab > 0));
    if (nominal == 0) continue;
    ++sized;
    const double count = static_cast<double>(parameter_count(p, p.nominal_vocab));
    CHECK(count >= 0.85 * nominal);
    CHECK(count <= 1.15 * nominal);
  }
  CHECK(sized == 8);
}

TEST_CASE("The scale presets have Llama proportions and the documented counts", "[trainer][presets]") {
  for (const char* name : {"llama-350m", "llama-760m", "llama-1.3b"}) {
    INFO(name);
    const auto p = find_model_preset(name);
    REQUIRE(p);
    CHECK(p->nominal_vocab == 32768);
    CHECK(p->d_model % 128 == 0);
    CHECK(p->ffn_hidden % 128 == 0);
    // ffn ≈ 8/3 d, rounded up to a multiple of 128.
    CHECK(p->ffn_hidden == (8 * p->d_model / 3 + 127) / 128 * 128);
    CHECK(error_of(*p) == "no error");
  }
  // The counts README.md and docs/trainer.md list (at 4096 and 32768 tokens).
  const auto count = [](const char* name, int64_t vocab) {
    return parameter_count(*find_model_preset(name), vocab);
  };
  CHECK(count("llama-350m", 32768) == 375440384);
  CHECK(count("llama-350m", 4096) == 316720128);
  CHECK(count("llama-760m", 32768) == 780215808);
  CHECK(count("llama-760m", 4096) == 692135424);
  CHECK(count("llama-1.3b", 32768) == 1348569088);
  CHECK(count("llama-1.3b", 4096) == 1231128576);
  CHECK(non_embedding_parameter_count(*find_model_preset("llama-1.3b")) == 1214351360);
  CHECK(find_model_preset("llama-760m")->head_dim() == 96);
}

TEST_CASE("A model resolves to a preset or to its custom shape, named by its label", "[trainer][presets]") {
  const ModelShape smoke = model_shape(ModelChoice::named("smoke"));
  CHECK(smoke.d_model == 64);
  const ModelShape same = custom({64, 2, 4, 2, 192});
  CHECK(same.name == "d64-L2-h4/2-f192");
  CHECK(parameter_count(same, 4096) == parameter_count(smoke, 4096));
  CHECK(linear_layers(same, 4096).size() == linear_layers(smoke, 4096).size());
  const ModelShape rope = custom({64, 2, 4, 2, 192, 500000, 1e-6});
  CHECK(rope.rope_theta == 500000);
  CHECK(rope.norm_eps == 1e-6);
  try {
    model_shape(ModelChoice::named("llama-7b"));
    FAIL("an unknown preset resolved");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()) ==
          "model: expected one of " + model_preset_names() +
              " (or a mapping of d_model, n_layers, n_heads, n_kv_heads, ffn_hidden), got "
              "\"llama-7b\"");
  }
  mxablate::contract::RunConfig c;
  // Every preset is trainable, the 8B shape too (its vocabulary is the data's).
  c.model = "llama-8b";
  CHECK(runnable_model_shape(c).d_model == 4096);
  c.model = ModelChoice::shaped({64, 2, 4, 2, 192});
  CHECK(runnable_model_shape(c).name == "d64-L2-h4/2-f192");
}

TEST_CASE("A custom shape's mistakes are refused naming the key", "[trainer][presets]") {
  CHECK(error_of(custom({64, 2, 4, 2, 192})) == "no error");
  CHECK(error_of(custom({64, 2, 4, 3, 192})) ==
        "model.n_kv_heads: must divide model.n_heads (4: each KV head serves a whole group of "
        "query heads), got 3");
  CHECK(error_of(custom({64, 2, 6, 6, 192})) == "model.n_heads: must divide model.d_model (64), got 6");
  CHECK(error_of(custom({96, 2, 32, 32, 256})) ==
        "model.n_heads: the head dimension d_model / n_heads = 3 must be even (RoPE rotates pairs "
        "of dimensions), got 32");
  CHECK(error_of(custom({1 << 20, 4096, 8, 8, 1 << 20})) ==
        "model: d1048576-L4096-h8/8-f1048576 has 31525205982576640 parameters outside the "
        "embeddings, more than the 100000000000 a run may have");
  // A shape built in code beyond the contract's bounds (or with no heads) is refused, not divided by.
  ModelShape broken = custom({64, 2, 4, 2, 192});
  broken.n_heads = 0;
  CHECK(error_of(broken).find("has a width or depth outside") != std::string::npos);
  // Every preset passes.
  for (const ModelShape& p : model_presets()) {
    INFO(p.name);
    CHECK(error_of(p) == "no error");
  }
}

TEST_CASE("With a vocabulary, the whole parameter count is bounded too", "[trainer][presets]") {
  mxablate::contract::RunConfig c;
  const ModelShape wide = custom({65536, 2, 512, 512, 65536});
  CHECK_NOTHROW(check_run_fits(c, wide, 0));
  CHECK(message_of([&] { check_run_fits(c, wide, int64_t{1} << 40); })
            .find("parameters with a 1099511627776-token vocabulary, more than the 100000000000") !=
        std::string::npos);
}

TEST_CASE("Presets span smoke to the 8B shape with the promised sizes", "[trainer][presets]") {
  const auto size = [](const char* name) {
    const auto p = find_model_preset(name);
    REQUIRE(p);
    return parameter_count(*p, p->name == "llama-8b" ? p->nominal_vocab : 4096);
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
