// Activation checkpointing: a checkpointed block keeps only its input, recomputes itself in the
// backward pass, and the model's loss, every parameter's gradient and the quantization telemetry
// are bit-identical to the unchecked model's, for plain BF16 and for MXFP4 with every random
// stream (stochastic rounding, random Hadamard signs) and the OCC/DGE side paths. So are they
// under selective recompute (norm outputs and SwiGLU's product made again in the backward), alone
// and with whole blocks besides.
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <string>
#include <tuple>
#include <vector>

#include "catch.h"
#include "mxablate/trainer/model/block_checkpoint.h"
#include "mxablate/trainer/plan/linear_plan.h"
#include "mxablate/trainer/model/model.h"

using namespace mxablate;
using namespace mxablate::trainer;
using contract::GemmPrecision;

namespace {

constexpr int64_t kVocab = 96;

contract::RunConfig bf16_config() { return contract::RunConfig{}; }

// All three GEMMs in MXFP4, dY rounded stochastically, Wgrad under a per-step random Hadamard.
contract::RunConfig mxfp4_config() {
  contract::RunConfig c;
  c.precision = {GemmPrecision::kMXFP4, GemmPrecision::kMXFP4, GemmPrecision::kMXFP4};
  c.quant.stochastic_rounding = {contract::OperandClass::kGrad};
  c.quant.hadamard = {kernels::HadamardMode::kPerStepRandom, 16, {kernels::GemmKind::kWgrad}};
  return c;
}

// The same with the weight gradient's estimator and outlier clamping (each saves and records
// something of its own).
contract::RunConfig mxfp4_dge_occ_config() {
  contract::RunConfig c = mxfp4_config();
  c.quant.dge = contract::DgeConfig{};
  c.quant.occ = contract::OccConfig{0.99};
  return c;
}

struct StepResult {
  at::Tensor losses;                          // one per micro-batch
  std::vector<std::string> names;             // parameter names, model order
  std::vector<at::Tensor> grads;              // accumulated over both micro-batches
  std::vector<QuantSession::Record> records;  // telemetry of the first micro-batch
};

// One optimizer step's forward and backward passes as the trainer takes them: two micro-batches
// accumulating gradients, telemetry on for the first only.
StepResult train_step(const contract::RunConfig& config, int64_t recomputed_blocks, bool selective = false,
                      FusedOps fused = FusedOps::kOnCuda) {
  ModelOptions o;
  o.shape = *find_model_preset("smoke");
  o.vocab_size = kVocab;
  o.init_seed = 5;
  o.layer_plans = plan_run_layers(config, linear_layers(o.shape, kVocab), o.shape.n_layers).phases[0];
  o.session = std::make_shared<QuantSession>();
  o.session->seed = 17;
  o.session->step = 3;
  o.recomputed_blocks = recomputed_blocks;
  o.selective_recompute = selective;
  o.fused_ops = fused;
  LlamaModel model(o);
  at::Generator gen = at::detail::createCPUGenerator(9);
  const at::Tensor tokens = at::randint(0, kVocab, {2, 2, 32}, gen);  // 64 tokens a micro-batch
  const at::Tensor targets = at::randint(0, kVocab, {2, 2, 32}, gen);
  StepResult r;
  std::vector<at::Tensor> losses;
  for (int64_t m = 0; m < 2; ++m) {
    model->session().collect_telemetry = m == 0;
    const at::Tensor loss = model->loss(tokens[m], targets[m]);
    (loss / 2.0).backward();
    losses.push_back(loss.detach());
  }
  CHECK_FALSE(model->session().collect_telemetry);  // restored by the checkpoint
  r.losses = at::stack(losses);
  for (const auto& item : model->named_parameters()) {
    r.names.push_back(item.key());
    r.grads.push_back(item.value().grad());
  }
  r.records = model->session().take_records();
  return r;
}

bool same_telemetry(const kernels::QuantTelemetry& a, const kernels::QuantTelemetry& b) {
  return std::tie(a.elements, a.nonzero_inputs, a.saturated, a.flushed, a.nonfinite_blocks,
                  a.dequant_clamped, a.sum_sq_error, a.sum_sq_input, a.sum_error) ==
         std::tie(b.elements, b.nonzero_inputs, b.saturated, b.flushed, b.nonfinite_blocks,
                  b.dequant_clamped, b.sum_sq_error, b.sum_sq_input, b.sum_error);
}

void check_identical(const StepResult& plain, const StepResult& checked, size_t expected_records) {
  CHECK(at::equal(plain.losses, checked.losses));
  REQUIRE(plain.names == checked.names);
  for (size_t i = 0; i < plain.grads.size(); ++i) {
    INFO(plain.names[i]);
    REQUIRE(plain.grads[i].defined());
    REQUIRE(checked.grads[i].defined());
    CHECK(at::equal(plain.grads[i], checked.grads[i]));
  }
  // Recorded once each (not again by the recompute), with the same values, in the same order.
  REQUIRE(plain.records.size() == expected_records);
  REQUIRE(checked.records.size() == expected_records);
  for (size_t i = 0; i < plain.records.size(); ++i) {
    const auto& a = plain.records[i];
    const auto& b = checked.records[i];
    INFO("record " << i << " layer " << a.layer);
    CHECK(std::tie(a.layer, a.gemm, a.operand) == std::tie(b.layer, b.gemm, b.operand));
    CHECK(same_telemetry(a.telemetry, b.telemetry));
    CHECK(a.occ_fraction == b.occ_fraction);
  }
}

// The smoke model's two blocks: none recomputed against the first of them, and against both;
// and selective recompute (norm outputs and SwiGLU's product made again) with 0, 1 and 2 blocks
// recomputed whole besides.
void check_identical(const contract::RunConfig& config, size_t expected_records,
                     FusedOps fused = FusedOps::kOnCuda) {
  const StepResult plain = train_step(config, 0, false, fused);
  for (const bool selective : {false, true}) {
    for (const int64_t recomputed : {0, 1, 2}) {
      if (recomputed == 0 && !selective) continue;
      INFO(recomputed << " of 2 blocks recomputed whole" << (selective ? ", selective recompute" : ""));
      check_identical(plain, train_step(config, recomputed, selective, fused), expected_records);
    }
  }
}

}  // namespace

TEST_CASE("Checkpointed blocks and selective recompute give the unchecked model's loss and gradients bit for bit",
          "[trainer][checkpointing]") {
  // 2 blocks x 7 linears x 3 GEMMs x 2 operands of telemetry under MXFP4; none under BF16.
  SECTION("BF16") { check_identical(bf16_config(), 0); }
  SECTION("MXFP4 F+D+W, SR on dY, random Hadamard on Wgrad") {
    check_identical(mxfp4_config(), 84);
  }
  SECTION("MXFP4 through the fused ops' CPU references (the CUDA path's wiring)") {
    check_identical(mxfp4_config(), 84, FusedOps::kAlways);
  }
  SECTION("and DGE and OCC") {
    check_identical(mxfp4_dge_occ_config(), 84);
    const StepResult checked = train_step(mxfp4_dge_occ_config(), 2);
    int with_fraction = 0;
    for (const auto& r : checked.records) with_fraction += r.occ_fraction.has_value();
    CHECK(with_fraction == 14);  // Fprop's X of every block linear
  }
}

TEST_CASE("A checkpointed block runs once without grad and once more in backward",
          "[trainer][checkpointing]") {
  at::Generator gen = at::detail::createCPUGenerator(2);
  const at::Tensor w = at::randn({4, 4}, gen).requires_grad_(true);
  const at::Tensor x0 = at::randn({3, 4}, gen).requires_grad_(true);
  auto session = std::make_shared<QuantSession>();
  session->collect_telemetry = true;
  std::vector<bool> grad_mode_seen, telemetry_seen;
  const auto block = [&](const at::Tensor& x) {
    grad_mode_seen.push_back(at::GradMode::is_enabled());
    telemetry_seen.push_back(session->collect_telemetry);
    return at::tanh(at::mm(x, w)) + x;
  };
  const at::Tensor x = x0 * 2;  // not a leaf: its gradient must flow on to x0
  const at::Tensor y = checkpointed(block, x, {w}, session);
  CHECK(std::string(y.grad_fn()->name()).find("CheckpointFunction") != std::string::npos);
  CHECK(grad_mode_seen == std::vector<bool>{false});  // no graph, no activations kept
  CHECK(telemetry_seen == std::vector<bool>{false});
  CHECK(session->collect_telemetry);
  y.sum().backward();
  CHECK(grad_mode_seen == std::vector<bool>{false, true});
  CHECK(telemetry_seen == std::vector<bool>{false, true});
  CHECK(session->collect_telemetry);

  const at::Tensor w2 = w.detach().clone().requires_grad_(true);
  const at::Tensor x2 = x0.detach().clone().requires_grad_(true);
  (at::tanh(at::mm(x2 * 2, w2)) + x2 * 2).sum().backward();
  CHECK(at::equal(w.grad(), w2.grad()));
  CHECK(at::equal(x0.grad(), x2.grad()));

  SECTION("Under NoGradGuard it is the block, once") {
    torch::NoGradGuard no_grad;
    const at::Tensor z = checkpointed(block, x, {w}, session);
    CHECK(grad_mode_seen.size() == 3);
    CHECK(telemetry_seen.back());  // evaluation records as it always did
    CHECK_FALSE(z.requires_grad());
  }
  SECTION("A parameter changed in place before backward is refused, not silently recomputed") {
    const at::Tensor y2 = checkpointed(block, x0, {w}, session);
    {
      torch::NoGradGuard no_grad;
      w.add_(1.0);
    }
    CHECK_THROWS(y2.sum().backward());
  }
}

TEST_CASE("The model's first blocks go through the checkpoint, as many as asked",
          "[trainer][checkpointing]") {
  for (const int64_t recomputed : {0, 1, 2}) {
    ModelOptions o;
    o.shape = *find_model_preset("smoke");
    o.vocab_size = kVocab;
    o.recomputed_blocks = recomputed;
    LlamaModel model(o);
    at::Generator gen = at::detail::createCPUGenerator(4);
    const at::Tensor x = at::randn({1, 32, o.shape.d_model}, gen).requires_grad_(true);
    for (int64_t b = 0; b < 2; ++b) {
      const at::Tensor y = model->blocks[static_cast<size_t>(b)]->as<BlockImpl>()->forward(x);
      INFO(recomputed << " blocks recomputed, block " << b);
      // The first `recomputed` blocks: they hold their activations longest.
      CHECK((std::string(y.grad_fn()->name()).find("CheckpointFunction") != std::string::npos) ==
            (b < recomputed));
    }
  }
}
