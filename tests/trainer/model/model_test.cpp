// The Llama model: parameter counts agree with the presets' arithmetic (the 8B shape, built on
// the meta device, has Llama 3.1 8B's exact 8,030,261,248), the forward pass is causal, the
// initialization is a function of the seed, and per-block BF16 exceptions are honoured.
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "catch.h"
#include "mxablate/trainer/model/model.h"
#include "mxablate/trainer/plan/run_fit.h"

using namespace mxablate;
using namespace mxablate::trainer;

namespace {

ModelOptions smoke_options(int64_t vocab = 96, uint64_t seed = 1) {
  ModelOptions o;
  o.shape = *find_model_preset("smoke");
  o.vocab_size = vocab;
  o.init_seed = seed;
  return o;
}

}  // namespace

TEST_CASE("Every preset's module has the parameters the preset arithmetic says", "[trainer][model]") {
  for (const ModelShape& shape : model_presets()) {
    ModelOptions o;
    o.shape = shape;
    o.vocab_size = shape.nominal_vocab > 0 ? shape.nominal_vocab : 4096;
    o.device = at::Device(at::kMeta);  // shapes only, no memory
    LlamaModel model(o);
    INFO(shape.name);
    CHECK(model->parameter_count() == parameter_count(shape, o.vocab_size));
    CHECK(model->linears().size() == linear_layers(shape, o.vocab_size).size());
    const auto layers = linear_layers(shape, o.vocab_size);
    const auto linears = model->linears();
    for (size_t i = 0; i < layers.size(); ++i) {
      CHECK(linears[i]->layer() == static_cast<int>(i));
      CHECK(linears[i]->in_features() == layers[i].in_features);
      CHECK(linears[i]->out_features() == layers[i].out_features);
    }
  }
  ModelOptions o;
  o.shape = *find_model_preset("llama-8b");
  o.vocab_size = 128256;
  o.device = at::Device(at::kMeta);
  CHECK(LlamaModel(o)->parameter_count() == 8030261248LL);
  CHECK(parameter_count(*find_model_preset("smoke"), 4096) < 1000000);
  // A custom shape (docs/design.md §4) the same way: an odd head count, one KV head.
  o.shape = model_shape(contract::ModelChoice::shaped({96, 3, 2, 1, 256, 500000, 1e-6}));
  o.vocab_size = 300;
  LlamaModel custom(o);
  CHECK(custom->parameter_count() == parameter_count(o.shape, 300));
  CHECK(custom->linears().size() == 3 * 7 + 1);
}

TEST_CASE("The smoke model's forward pass has the right shape and is causal", "[trainer][model]") {
  LlamaModel model(smoke_options());
  at::Generator gen = at::detail::createCPUGenerator(3);
  const at::Tensor tokens = at::randint(0, 96, {2, 32}, gen);
  torch::NoGradGuard no_grad;
  const at::Tensor logits = model->forward(tokens);
  REQUIRE(logits.sizes() == at::IntArrayRef({2, 32, 96}));
  CHECK(logits.isfinite().all().item<bool>());
  // Changing token 20 changes no logit before position 20, and does change position 20's.
  at::Tensor changed = tokens.clone();
  changed.index_put_({0, 20}, (tokens.index({0, 20}) + 1) % 96);
  const at::Tensor logits2 = model->forward(changed);
  CHECK(at::equal(logits2.narrow(1, 0, 20), logits.narrow(1, 0, 20)));
  CHECK_FALSE(at::equal(logits2.index({0, 20}), logits.index({0, 20})));
  CHECK(at::equal(logits2.index({1}), logits.index({1})));
}

TEST_CASE("Initialization is a function of the seed", "[trainer][model]") {
  LlamaModel a(smoke_options(96, 5)), b(smoke_options(96, 5)), c(smoke_options(96, 6));
  const auto pa = a->parameters(), pb = b->parameters(), pc = c->parameters();
  bool all_equal = true, any_differs = false;
  for (size_t i = 0; i < pa.size(); ++i) {
    all_equal = all_equal && at::equal(pa[i], pb[i]);
    any_differs = any_differs || !at::equal(pa[i], pc[i]);
  }
  CHECK(all_equal);
  CHECK(any_differs);
  // Initial loss is close to ln(vocab): the model starts near uniform.
  at::Generator gen = at::detail::createCPUGenerator(4);
  const at::Tensor tokens = at::randint(0, 96, {4, 32}, gen);
  torch::NoGradGuard no_grad;
  const double loss = a->loss(tokens, tokens).item<double>();
  CHECK(loss == Approx(std::log(96.0)).margin(0.1));
}

TEST_CASE("Blocks kept in BF16 get the BF16 plan, the others the run's plan", "[trainer][model]") {
  contract::RunConfig config;
  config.precision = {contract::GemmPrecision::kMXFP4, contract::GemmPrecision::kMXFP4,
                      contract::GemmPrecision::kMXFP4};
  config.quant.bf16_first_blocks = 1;
  config.quant.bf16_last_blocks = 1;
  ModelOptions o = smoke_options();
  o.shape.n_layers = 4;
  o.layer_plans = plan_run_layers(config, linear_layers(o.shape, o.vocab_size), 4).phases[0];
  LlamaModel model(o);
  const auto linears = model->linears();
  for (const auto& l : linears) {
    const int block = l->layer() / 7;
    const bool quantized = l->plan()[kernels::GemmKind::kFprop].precision == GemmPrecision::kMXFP4;
    INFO("layer " << l->layer());
    CHECK(quantized == (block == 1 || block == 2));
  }
  // A training step through quantized blocks produces finite gradients for every parameter.
  at::Generator gen = at::detail::createCPUGenerator(8);
  const at::Tensor tokens = at::randint(0, 96, {2, 32}, gen);  // 64 tokens: Wgrad blocks of 32
  model->loss(tokens, tokens).backward();
  for (const auto& p : model->parameters()) {
    REQUIRE(p.grad().defined());
    CHECK(p.grad().isfinite().all().item<bool>());
  }
}
