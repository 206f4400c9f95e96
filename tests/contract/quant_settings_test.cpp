// The typed numerics settings: one reader for the base sections, the schedule's phases and the
// overrides; compact JSON that keeps run ids stable; the arm description and the paper match.
#include "catch.h"
#include "config_error.h"
#include "mxablate/contract/run_config.h"
#include "mxablate/contract/settings_difference.h"

using namespace mxablate::contract;
using nlohmann::json;

namespace {

using mxablate::test::error_of;
using mxablate::test::valid;

constexpr auto kBF16 = GemmPrecision::kBF16, kFP8 = GemmPrecision::kFP8,
               kMX = GemmPrecision::kMXFP4;

RunConfig with(GemmPrecision f, GemmPrecision d, GemmPrecision w) {
  RunConfig c;
  c.precision = {f, d, w};
  return c;
}

}  // namespace

TEST_CASE("Keys added after the first release stay out of the compact JSON at their defaults") {
  // The run id is a hash of this JSON: a release that adds a setting must not change it.
  const json j = to_json(RunConfig{});
  for (const char* key : {"weight_blocks", "sr_prescale", "dge", "occ"})
    CHECK_FALSE(j["quant"].contains(key));
  CHECK_FALSE(j.contains("precision_schedule"));
  CHECK_FALSE(j.contains("overrides"));
  CHECK_FALSE(j["train"].contains("activation_checkpointing"));
  const json full = to_json_full(RunConfig{});
  CHECK(full["train"]["activation_checkpointing"] == false);
  CHECK(full["quant"]["dge"].is_null());
  CHECK(full["quant"]["weight_blocks"] == "1d");
  CHECK(full["overrides"] == json::array());
  // The schema's key tree shows every key, optional sections filled with examples.
  const json tree = config_key_tree();
  CHECK(tree["quant"]["dge"]["k"] == 5.0);
  CHECK(tree["quant"]["occ"]["quantile"] == 0.99);
  CHECK(tree["precision_schedule"][0].contains("at_fraction"));
  CHECK(tree["overrides"][0]["quant"].contains("sr_prescale"));
  CHECK_FALSE(tree["overrides"][0]["quant"].contains("gemm_path"));
  CHECK(tree["train"]["activation_checkpointing"] == false);  // false, true, "auto" or a count
}

TEST_CASE("Activation checkpointing is read in every form, written when on, and does not describe an arm") {
  using Mode = Recompute::Mode;
  json j = valid();
  const auto read = [&](const json& v) {
    j["train"]["activation_checkpointing"] = v;
    return run_config_from_json(j).train.activation_checkpointing;
  };
  CHECK(read(true) == Recompute{Mode::kAll, 0});
  CHECK(read(false) == Recompute{});
  CHECK(read("auto") == Recompute{Mode::kAuto, 0});
  CHECK(read(12) == Recompute{Mode::kFirstBlocks, 12});
  CHECK(read(12.0) == Recompute{Mode::kFirstBlocks, 12});
  CHECK(read(0) == Recompute{});  // false's setting: one identity per setting
  CHECK(read("selective") == Recompute{Mode::kNone, 0, true});
  CHECK(read("selective+12") == Recompute{Mode::kFirstBlocks, 12, true});
  CHECK(read("selective+0") == Recompute{Mode::kNone, 0, true});  // "selective"'s setting
  CHECK(read("selective+4096") == Recompute{Mode::kFirstBlocks, 4096, true});
  // Each writes back as it was read, and reads back the same; false stays out of the identity.
  for (const json& v : {json(true), json("auto"), json(12), json("selective"), json("selective+12")}) {
    INFO(v.dump());
    json k = valid();
    k["train"]["activation_checkpointing"] = v;
    const RunConfig c = run_config_from_json(k);
    CHECK(to_json(c)["train"]["activation_checkpointing"] == v);
    CHECK(run_config_from_json(to_json(c)).train.activation_checkpointing == c.train.activation_checkpointing);
    CHECK(to_string(c.train.activation_checkpointing) == (v.is_string() ? v.get<std::string>() : v.dump()));
  }
  CHECK_FALSE(to_json(run_config_from_json(valid()))["train"].contains("activation_checkpointing"));
  const std::string expected = "train.activation_checkpointing: expected true, false, auto, selective, "
                               "selective+N (N blocks recomputed whole besides) or a number of blocks "
                               "from 0 to 4096, got ";
  for (const json& bad : {json("yes"), json("AUTO"), json(-1), json(2.5), json(4097), json(1e300),
                          json::array(), json(nullptr), json::object(), json("Selective"), json("selective+"),
                          json("selective+-1"), json("selective+4097"), json("selective+99999"),
                          json("selective+ 3"), json("selective+3x"), json("selective+auto"),
                          json("selectivex"), json("selective+all")}) {
    j = valid();
    j["train"]["activation_checkpointing"] = bad;
    CHECK(error_of(j) == expected + shown_json(bad));
  }
  // It changes how a run executes, not one bit of its results: not an intervention.
  const RunConfig fp8 = with(kFP8, kFP8, kFP8);
  for (const Recompute r :
       {Recompute{Mode::kAll, 0}, Recompute{Mode::kAuto, 0}, Recompute{Mode::kFirstBlocks, 3},
        Recompute{Mode::kNone, 0, true}, Recompute{Mode::kFirstBlocks, 3, true}}) {
    RunConfig arm = fp8;
    arm.train.activation_checkpointing = r;
    CHECK(settings_difference(arm, fp8).empty());
    CHECK(describe_differences(settings_difference(arm, fp8), true) == "-");
    arm.precision.fprop = kMX;
    CHECK(describe_differences(settings_difference(arm, fp8), true) == "fprop mxfp4");
    CHECK(paper_figure(arm, fp8) == "modest");
  }
}

TEST_CASE("Malformed numerics settings name their key path") {
  const auto bad = [](const char* section, const json& value) {
    json j = valid();
    j[section] = value;
    return error_of(j);
  };
  json q = valid()["quant"];
  q["dge"] = {{"k", 0}};
  CHECK(bad("quant", q) == "quant.dge.k: must be > 0, got 0.0");
  q["dge"] = {{"k", 5}, {"clamp", -1.0}};
  CHECK(bad("quant", q) == "quant.dge.clamp: must be > 0, got -1.0");
  q["dge"] = {{"kay", 5}};
  CHECK(bad("quant", q) == "quant.dge.kay: unknown key");
  q = valid()["quant"];
  q["occ"] = {{"quantile", 0}};
  CHECK(bad("quant", q) == "quant.occ.quantile: must be in (0, 1], got 0.0");
  q["occ"] = {{"quantile", 1.01}};
  CHECK(bad("quant", q) == "quant.occ.quantile: must be in (0, 1], got 1.01");
  q = valid()["quant"];
  q["scale_rule"] = "msee";
  CHECK(bad("quant", q) == "quant.scale_rule: expected one of floor, ceil, even, mse, got \"msee\"");
  q = valid()["quant"];
  q["weight_blocks"] = "3d";
  CHECK(bad("quant", q) == "quant.weight_blocks: expected one of 1d, 2d, got \"3d\"");
  q = valid()["quant"];
  q["sr_prescale"] = 0;
  CHECK(bad("quant", q) == "quant.sr_prescale: must be in [2^-24, 1] (1: no pre-scale), got 0.0");
  q = valid()["quant"];
  q["stochastic_rounding"] = {"grad", "gradient"};
  CHECK(bad("quant", q) ==
        "quant.stochastic_rounding[1]: expected one of activation, weight, grad, got \"gradient\"");

  const json bf16 = {{"fprop", "bf16"}};
  CHECK(bad("precision_schedule", json::array({{{"at_fraction", 0.9}, {"precision", bf16}},
                                                {{"at_fraction", 0.5}, {"precision", bf16}}})) ==
        "precision_schedule[1].at_fraction: must be greater than the previous phase's 0.9, got 0.5");
  CHECK(bad("precision_schedule", json::array({{{"at_fraction", 1.0}, {"precision", bf16}}})) ==
        "precision_schedule[0].at_fraction: must be in (0, 1), got 1.0");
  CHECK(bad("precision_schedule", json::array({{{"precision", bf16}}})).rfind(
            "precision_schedule[0].at_fraction: required", 0) == 0);
  CHECK(bad("precision_schedule", json::array({{{"at_fraction", 0.5}}})) ==
        "precision_schedule[0].precision: required");
  CHECK(bad("precision_schedule", {{"at_fraction", 0.5}}).rfind("precision_schedule: expected a list", 0) == 0);

  CHECK(bad("overrides", json::array({{{"precision", bf16}}})).rfind("overrides[0].layers: required", 0) == 0);
  CHECK(bad("overrides", json::array({{{"layers", ""}, {"precision", bf16}}})) ==
        "overrides[0].layers: must not be empty, got \"\"");
  CHECK(bad("overrides", json::array({{{"layers", "lm_head"}}})) ==
        "overrides[0]: sets nothing (give it precision or quant keys)");
  CHECK(bad("overrides", json::array({{{"layers", "x"}, {"quant", {{"gemm_path", "fp8"}}}}})) ==
        "overrides[0].quant.gemm_path: unknown key");
  CHECK(bad("overrides", json::array({{{"layers", "x"}, {"precision", {{"fprop", "fp4"}}}}})) ==
        "overrides[0].precision.fprop: expected one of bf16, fp8, mxfp4, nvfp4, got \"fp4\"");
}

TEST_CASE("A schedule phase keeps the previous phase's precision for GEMMs it does not name") {
  json j = valid();
  j["precision"] = {{"fprop", "mxfp4"}, {"dgrad", "mxfp4"}, {"wgrad", "mxfp4"}};
  j["precision_schedule"] = json::array({{{"at_fraction", 0.5}, {"precision", {{"wgrad", "bf16"}}}},
                                         {{"at_fraction", 0.8}, {"precision", {{"fprop", "fp8"}}}}});
  const RunConfig c = run_config_from_json(j);
  CHECK(c.precision_schedule[0].precision == PrecisionConfig{kMX, kMX, kBF16});
  CHECK(c.precision_schedule[1].precision == PrecisionConfig{kFP8, kMX, kBF16});
  CHECK(block_settings_in_phase(c, 2).precision == PrecisionConfig{kFP8, kMX, kBF16});
  CHECK(block_settings_in_phase(c, 0).precision == PrecisionConfig{kMX, kMX, kMX});
}

TEST_CASE("An arm is described by every setting that differs from its baseline") {
  const RunConfig fp8 = with(kFP8, kFP8, kFP8);
  RunConfig arm = with(kMX, kMX, kMX);
  CHECK(describe_differences(settings_difference(arm, fp8), false) == "-");
  CHECK(describe_differences(settings_difference(arm, fp8), true) ==
        "dgrad mxfp4 + fprop mxfp4 + wgrad mxfp4");
  arm.quant.stochastic_rounding = {OperandClass::kGrad};
  arm.quant.hadamard.mode = HadamardMode::kDeterministic;
  arm.quant.scale_rule = ScaleRule::kCeil;
  arm.quant.dge = DgeConfig{};
  arm.train.lr = 2e-3;
  arm.train.seed = 7;  // seeds pair runs, they do not describe arms
  arm.device = Device::kCUDA;
  CHECK(describe_differences(settings_difference(arm, fp8), false) ==
        "dge (clamp=3.0, k=5.0) + H16 deterministic (wgrad) + scale_rule ceil + SR(grad) + "
        "train.lr 0.002");
  RunConfig scheduled = with(kMX, kMX, kMX);
  scheduled.precision_schedule = {{0.5, {kFP8, kFP8, kMX}}, {0.9, {kBF16, kBF16, kBF16}}};
  LayerOverride ends{"blocks.0.*", {}};
  ends.patch.fprop = ends.patch.dgrad = ends.patch.wgrad = kBF16;
  LayerOverride head{"lm_head", {}};
  head.patch.wgrad = kMX;
  head.patch.scale_rule = ScaleRule::kMse;
  scheduled.overrides = {ends, head};
  CHECK(describe_differences(settings_difference(scheduled, fp8), false) ==
        "overrides blocks.0.*: bf16; lm_head: W mxfp4, scale_rule mse + "
        "F fp8 D fp8 W mxfp4 from 0.5, bf16 from 0.9");
  RunConfig rotated_base = fp8;
  rotated_base.quant.hadamard.mode = HadamardMode::kDeterministic;
  CHECK(describe_differences(settings_difference(fp8, rotated_base), false) == "no Hadamard");
}

TEST_CASE("The paper's figure only beside an arm that is exactly one of the paper's") {
  const RunConfig fp8 = with(kFP8, kFP8, kFP8);
  CHECK(paper_figure(fp8, fp8) == "baseline (FP8)");
  CHECK(paper_figure(with(kMX, kFP8, kFP8), fp8) == "modest");
  CHECK(paper_figure(with(kMX, kMX, kFP8), fp8) == "modest");
  RunConfig fdw = with(kMX, kMX, kMX);
  CHECK(paper_figure(fdw, fp8) == "+26-27 %");
  fdw.train.lr = 5e-3;  // not numerics: still the paper's arm
  fdw.quant.gemm_path = GemmPath::kFP8;
  CHECK(paper_figure(fdw, fp8) == "+26-27 %");
  RunConfig h16 = fdw;
  h16.quant.hadamard.mode = HadamardMode::kDeterministic;
  CHECK(paper_figure(h16, fp8) == "+8-9 %");
  h16.quant.hadamard.size = 32;
  CHECK_FALSE(paper_figure(h16, fp8).has_value());
  RunConfig sr = fdw;
  sr.quant.stochastic_rounding = {OperandClass::kGrad};
  CHECK(paper_figure(sr, fp8) == "did not converge");
  // The examples: a scale rule, BF16 first/last blocks, an override, a schedule.
  for (int variant = 0; variant < 4; ++variant) {
    RunConfig other = fdw;
    if (variant == 0) other.quant.scale_rule = ScaleRule::kCeil;
    if (variant == 1) other.quant.bf16_first_blocks = 1;
    if (variant == 2) other.overrides = {{"lm_head", {}}}, other.overrides[0].patch.fprop = kMX;
    if (variant == 3) other.precision_schedule = {{0.9, {kBF16, kBF16, kBF16}}};
    INFO("variant " << variant);
    CHECK_FALSE(paper_figure(other, fp8).has_value());
  }
  // Against a BF16 baseline the paper's figures (relative to FP8) do not apply.
  CHECK_FALSE(paper_figure(with(kMX, kMX, kMX), with(kBF16, kBF16, kBF16)).has_value());
  // F with Dgrad/Wgrad in BF16 is not the paper's F (its others ran in FP8).
  CHECK_FALSE(paper_figure(with(kMX, kBF16, kBF16), fp8).has_value());
}

TEST_CASE("A model difference is one setting, shown by the model's label") {
  RunConfig reference;
  reference.model = "llama-20m";
  RunConfig run = reference;
  run.model = ModelChoice::shaped({512, 8, 8, 4, 1408});
  run.quant.scale_rule = ScaleRule::kMse;
  const auto differences = settings_difference(run, reference);
  REQUIRE(differences.size() == 2);
  CHECK(differences[0].key == "model");  // in key order: model before quant
  CHECK(differences[0].value == "d512-L8-h8/4-f1408");
  CHECK(differences[0].raw["n_layers"] == 8);
  CHECK(describe_differences(differences, false) == "model d512-L8-h8/4-f1408 + scale_rule mse");
  // A preset against another preset: by name; the same model: no difference.
  run = reference;
  run.model = "llama-5m";
  CHECK(describe_differences(settings_difference(run, reference), false) == "model llama-5m");
  CHECK(settings_difference(reference, reference).empty());
  // The same shape written with and without its default rope_theta is the same model.
  RunConfig a, b;
  a.model = ModelChoice::shaped({64, 2, 4, 2, 192});
  b.model = ModelChoice::shaped({64, 2, 4, 2, 192, 10000.0, 1e-5});
  CHECK(settings_difference(a, b).empty());
}
