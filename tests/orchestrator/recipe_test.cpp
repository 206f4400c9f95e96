// Loading recipes: the docs/design.md §5 example reads as written; values keep their YAML types; the
// positions of keys and values are recorded for errors found after merging.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "catch.h"
#include "mxablate/orchestrator/plan.h"
#include "mxablate/orchestrator/recipe.h"
#include "test_util.h"

using namespace mxablate::orchestrator;
using namespace mxablate::testing;

namespace {
// Settings are typed; the tests compare their names.
std::string name_of(mxablate::contract::GemmPrecision p) { return std::string(mxablate::contract::to_string(p)); }
std::string name_of(mxablate::kernels::HadamardMode m) { return std::string(mxablate::kernels::to_string(m)); }
Plan parse_and_expand(const std::string& text) { return expand_recipe(parse_recipe(text, "s.yaml")); }
// The planner's error for `text`, or "" when it plans.
std::string error_of(const std::string& text) {
  try {
    parse_and_expand(text);
  } catch (const RecipeError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("the paper recipe loads with its arms in order, extends, grid and target") {
  const Recipe r = load_recipe((kRecipesDir / "paper-arms-20m.yaml").string());
  CHECK(r.name == "paper-arms-20m");
  REQUIRE(r.arms.size() == 7);
  const std::vector<std::string> names{"fp8", "F", "FD", "FDW", "FDW+SR", "FDW+RHT16", "FDW+H16"};
  for (size_t i = 0; i < names.size(); ++i) CHECK(r.arms[i].name == names[i]);
  CHECK(r.arms[4].extends == "FDW");
  CHECK(r.arms[4].extends_at == Location{26, 24});
  CHECK_FALSE(r.arms[0].extends);
  REQUIRE(r.grid.size() == 1);
  CHECK(r.grid[0].name == "seed");
  CHECK(r.grid[0].path == "train.seed");
  CHECK(r.grid[0].values.size() == 3);
  CHECK(r.target.from_arm == "fp8");
  CHECK(r.target.at_fraction == Approx(0.3));
  CHECK(r.target.stop_at_target);  // the paper's design: every run stops at the live target
  CHECK_FALSE(r.target.val_loss);
  CHECK(r.base.value["train"]["max_tokens"].is_number_float());
  CHECK(r.base.value["train"]["max_tokens"].get<double>() == 100e6);
  CHECK(r.base.value["train"]["global_batch_tokens"].is_number_integer());
  CHECK(r.base.where("train.lr") == Location{17, 62});
  CHECK(r.base.where_key("train") == Location{17, 3});
}

TEST_CASE("the paper recipe expands to 21 resolved runs with the arms' settings") {
  const Recipe r = load_recipe((kRecipesDir / "paper-arms-20m.yaml").string());
  const Plan plan = expand_recipe(r);
  REQUIRE(plan.runs.size() == 21);
  CHECK(plan.total_tokens() == Approx(21 * 100e6));
  const RunSpec& h16 = plan.runs[19];  // FDW+H16, seed 2
  CHECK(h16.arm == "FDW+H16");
  CHECK(h16.config.train.seed == 2);
  CHECK(name_of(h16.config.precision.fprop) == "mxfp4");
  CHECK(name_of(h16.config.precision.wgrad) == "mxfp4");
  CHECK(name_of(h16.config.quant.hadamard.mode) == "deterministic");
  CHECK(h16.config.quant.hadamard.size == 16);
  CHECK(h16.config.train.lr == Approx(1e-3));
  CHECK(h16.config.train.max_tokens == Approx(100e6));
  CHECK(h16.config.data.seq_len == 512);
  CHECK(h16.config.sweep == "paper-arms-20m");
  CHECK(h16.config.arm == "FDW+H16");
  CHECK(h16.config.run_id == h16.run_id);
  CHECK(h16.config_json["run_id"] == h16.run_id);
  CHECK_FALSE(h16.config.target.val_loss);  // derived from an arm: unknown when runs start
  CHECK(h16.config.target.stop_at_target);    // stops once the live target reaches it
  const RunSpec& fp8 = plan.runs[0];
  CHECK(name_of(fp8.config.precision.fprop) == "fp8");
  CHECK(name_of(fp8.config.quant.hadamard.mode) == "none");
  CHECK(plan.target["from_arm"] == "fp8");
  // Where values came from, for errors raised later (a missing data directory at launch).
  CHECK(h16.where("quant.hadamard.mode") == Location{28, 54});
  CHECK(h16.where("train.seed") == Location{30, 13});  // the seed's value in the grid list
  CHECK(h16.where("data.dataset") == Location{16, 19});
}

TEST_CASE("YAML scalars get their YAML 1.2 types, quoted ones stay strings") {
  const Recipe r = parse_recipe(R"(name: t
arms:
  a: {train: {lr: 1e-3, max_tokens: 1000000, seed: 7}, mllog: true, model: smoke}
  b: {data: {dataset: "123"}}
)",
                                "t.yaml");
  const auto& a = r.arms[0].overrides.value;
  CHECK(a["train"]["lr"].get<double>() == Approx(0.001));
  CHECK(a["train"]["max_tokens"].is_number_integer());
  CHECK(a["mllog"] == true);
  CHECK(r.arms[1].overrides.value["data"]["dataset"] == "123");
}

TEST_CASE("grid axes take any config path, include and exclude adjust the product") {
  const Recipe r = parse_recipe(R"(name: g
base: {model: smoke, data: {seq_len: 64}, train: {global_batch_tokens: 1024}}
arms:
  x: {}
  y: {precision: {wgrad: mxfp4}}
grid:
  seed: [1, 2]
  train.lr: [0.001, 0.002]
  precision.fprop: [bf16, mxfp4]
exclude:
  - {arm: y, seed: 2}
  - {precision.fprop: mxfp4, train.lr: 0.002}
include:
  - {arm: y, seed: 9, train.lr: 0.005}
  - {arm: x, seed: 3, train.warmup_tokens: 4096}
)",
                                "g.yaml");
  const Plan plan = expand_recipe(r);
  // 2 arms × 8 combinations = 16; exclude y/seed 2 (4 runs), then fprop mxfp4 with lr 0.002
  // (x: 2 seeds, y: seed 1 only) = 3 more → 9; include: y seed 9 lr .005 × 2 fprop = 2, x seed
  // 3 × 2 lr × 2 fprop = 4 → 15.
  CHECK(plan.runs.size() == 15);
  for (const RunSpec& run : plan.runs) {
    if (run.config.train.seed > 2) continue;  // included runs are not subject to exclude
    CHECK_FALSE((run.arm == "y" && run.config.train.seed == 2));
    CHECK_FALSE((name_of(run.config.precision.fprop) == "mxfp4" && run.config.train.lr == Approx(0.002)));
  }
  const RunSpec& included = plan.runs[plan.runs.size() - 1];
  CHECK(included.arm == "x");
  CHECK(included.config.train.seed == 3);
  CHECK(included.config.train.warmup_tokens == Approx(4096));
  REQUIRE(included.axes.size() == 4);  // seed, train.lr, precision.fprop, train.warmup_tokens
  CHECK(included.axes[3].axis == "train.warmup_tokens");
  CHECK(plan.axis_names == std::vector<std::string>{"seed", "train.lr", "precision.fprop",
                                                    "train.warmup_tokens"});
  // Axis order: the first axis varies slowest.
  CHECK(plan.runs[0].config.train.seed == 1);
  CHECK(plan.runs[0].config.train.lr == Approx(0.001));
  CHECK(name_of(plan.runs[0].config.precision.fprop) == "bf16");
  CHECK(name_of(plan.runs[1].config.precision.fprop) == "mxfp4");
}

TEST_CASE("an arm's extends chain merges mapping by mapping, lists replace") {
  const Recipe r = parse_recipe(R"(name: e
base: {model: smoke, data: {seq_len: 64}, train: {global_batch_tokens: 1024}}
arms:
  c: {extends: b, quant: {hadamard: {size: 32}}}
  a: {precision: {fprop: mxfp4}, quant: {stochastic_rounding: [grad, weight]}}
  b: {extends: a, precision: {dgrad: mxfp4}, quant: {stochastic_rounding: [activation],
      hadamard: {mode: deterministic}}}
)",
                                "e.yaml");
  const Plan plan = expand_recipe(r);
  REQUIRE(plan.runs.size() == 3);
  const auto& c = plan.runs[0].config;
  CHECK(plan.runs[0].arm == "c");
  CHECK(name_of(c.precision.fprop) == "mxfp4");
  CHECK(name_of(c.precision.dgrad) == "mxfp4");
  CHECK(name_of(c.precision.wgrad) == "bf16");
  CHECK(c.quant.stochastic_rounding == mxablate::contract::OperandClassSet{mxablate::contract::OperandClass::kActivation});
  CHECK(name_of(c.quant.hadamard.mode) == "deterministic");
  CHECK(c.quant.hadamard.size == 32);
  CHECK(c.quant.hadamard.gemms == mxablate::contract::GemmSet{mxablate::kernels::GemmKind::kWgrad});  // the default
}

TEST_CASE("a fixed target reaches every run's config") {
  const Recipe r = parse_recipe(R"(name: t
base: {model: smoke, data: {seq_len: 64}, train: {global_batch_tokens: 1024}}
target: {val_loss: 3.3, stop_at_target: true}
arms: {a: {}}
)",
                                "t.yaml");
  const Plan plan = expand_recipe(r);
  CHECK(plan.runs[0].config.target.val_loss == Approx(3.3));
  CHECK(plan.runs[0].config.target.stop_at_target);
  CHECK(plan.target_val_loss == Approx(3.3));
}

TEST_CASE("a target derived from an arm may stop the runs: the live target, never in the run id") {
  const std::string head = R"(name: live
base: {model: smoke, data: {seq_len: 64}, train: {global_batch_tokens: 1024, max_tokens: 1e5}}
arms: {fp8: {precision: {fprop: fp8}}, F: {precision: {fprop: mxfp4}}}
)";
  const Recipe r = parse_recipe(
      head + "target: {from_arm: fp8, at_fraction: 0.3, stop_at_target: true, min_ceiling: 1.5}\n",
      "l.yaml");
  CHECK(r.target.from_arm == "fp8");
  CHECK(r.target.stop_at_target);
  CHECK(r.target.min_ceiling == 1.5);
  CHECK(r.target.as_json() == nlohmann::json{{"from_arm", "fp8"},
                                             {"at_fraction", 0.3},
                                             {"stop_at_target", true},
                                             {"min_ceiling", 1.5}});
  const Plan plan = expand_recipe(r);
  // The value is fixed mid-sweep and reaches the runs through target.json, never their config.
  CHECK_FALSE(plan.runs[1].config.target.val_loss);
  CHECK(plan.runs[1].config.target.stop_at_target);
  // Without stop_at_target the configs, and so the run ids, are what they always were: the
  // fraction and the floor are the sweep's, not a run's.
  const Plan before = expand_recipe(parse_recipe(head + "target: {from_arm: fp8, at_fraction: 0.8}\n", "b.yaml"));
  const Plan later = expand_recipe(
      parse_recipe(head + "target: {from_arm: fp8, at_fraction: 0.3, min_ceiling: 2}\n", "c.yaml"));
  CHECK(later.runs[1].run_id == before.runs[1].run_id);
  CHECK(plan.runs[1].run_id != before.runs[1].run_id);  // stopping changes what a run computes
  CHECK_FALSE(parse_recipe(head + "target: {from_arm: fp8}\n", "d.yaml").target.as_json().contains(
      "min_ceiling"));
}

TEST_CASE("a perplexity target is its loss: stored, and given to every run, as ln(perplexity)") {
  const std::string head = R"(name: ppl
base:
  model: smoke
  data: {seq_len: 64}
  train: {global_batch_tokens: 1024, max_tokens: 1e5}
arms: {a: {}, b: {}}
)";
  const Recipe r =
      parse_recipe(head + "target: {perplexity: 27.1, stop_at_target: true}\n", "p.yaml");
  REQUIRE(r.target.perplexity);
  CHECK(*r.target.perplexity == 27.1);
  REQUIRE(r.target.val_loss);
  CHECK(*r.target.val_loss == std::log(27.1));
  CHECK(r.target.as_json() ==
        nlohmann::json{{"val_loss", std::log(27.1)}, {"stop_at_target", true}});
  const Plan plan = expand_recipe(r);
  CHECK(plan.target_val_loss == std::log(27.1));
  CHECK(plan.runs[1].config.target.val_loss == std::log(27.1));
  // The same run ids as the equivalent val_loss target: one definition, whichever way written.
  const Recipe same = parse_recipe(
      head + "target: {val_loss: " + nlohmann::json(std::log(27.1)).dump() +
          ", stop_at_target: true}\n",
      "l.yaml");
  CHECK(expand_recipe(same).runs[1].run_id == plan.runs[1].run_id);
  for (const char* bad : {"1", "0.5", "-3", "\"27\"", "true"}) {
    INFO(bad);
    CHECK_THROWS_WITH(parse_recipe(head + "target: {perplexity: " + bad + "}\n", "p.yaml"),
                      std::string("p.yaml:7:22: target.perplexity: expected a finite number > 1 "
                                  "(the loss is its logarithm), got ") +
                          bad);
  }
}

TEST_CASE("each run's interventions are its differences from the baseline run at its grid point") {
  const Recipe r = parse_recipe(R"(name: d
base: {model: smoke, data: {seq_len: 64}, train: {global_batch_tokens: 1024}}
target: {from_arm: base, at_fraction: 0.8}
arms:
  x: {quant: {scale_rule: ceil}, train: {weight_decay: 0.05}}
  base: {}
grid:
  train.lr: [1e-3, 2e-3]
  seed: [1, 2]
)", "d.yaml");
  const Plan plan = expand_recipe(r);
  CHECK(plan.baseline_arm == "base");  // the target's arm, not the first one
  REQUIRE(plan.runs.size() == 8);
  for (const RunSpec& run : plan.runs) {
    INFO(run_label(run));
    // Compared at its own learning rate and seed: neither shows, only what the arm sets.
    CHECK(run.interventions == (run.arm == "x" ? "scale_rule ceil + train.weight_decay 0.05" : "-"));
  }
}

// ---- model: a preset's name or a shape (docs/design.md §4), as a grid axis like any other.

TEST_CASE("a custom model shape plans, and a grid over model mixes names and mappings") {
  const char* text = R"(name: shapes
base:
  model: {d_model: 64, n_layers: 2, n_heads: 4, n_kv_heads: 2, ffn_hidden: 192}
  data: {seq_len: 64}
  train: {global_batch_tokens: 1024, max_tokens: 1e5}
arms:
  bf16: {}
  fp4: {precision: {fprop: mxfp4, dgrad: mxfp4, wgrad: mxfp4}}
grid:
  model:
    - smoke
    - {d_model: 128, n_layers: 3, n_heads: 4, n_kv_heads: 4, ffn_hidden: 384}
    - {d_model: 64, n_layers: 2, n_heads: 4, n_kv_heads: 2, ffn_hidden: 192, rope_theta: 500000}
)";
  const Plan plan = expand_recipe(parse_recipe(text, "shapes.yaml"));
  REQUIRE(plan.runs.size() == 6);
  const RunSpec& preset = plan.runs[0];
  CHECK(preset.config.model == mxablate::contract::ModelChoice::named("smoke"));
  CHECK(preset.config_json["model"] == "smoke");  // the grid's name replaces the base's mapping
  const RunSpec& wide = plan.runs[1];
  REQUIRE(wide.config.model.custom);
  CHECK(wide.config.model.custom->d_model == 128);
  CHECK(wide.config.model.custom->n_layers == 3);
  CHECK(axis_text(wide, wide.axes[0]) == "d128-L3-h4/4-f384");
  CHECK(run_label(wide) == "bf16 model=d128-L3-h4/4-f384");
  CHECK(axis_text(preset, preset.axes[0]) == "smoke");
  const RunSpec& rope = plan.runs[2];
  CHECK(rope.config_json["model"]["rope_theta"] == 500000.0);
  CHECK(mxablate::contract::model_label(rope.config.model) == "d64-L2-h4/2-f192-rt500000");
  // Every run differs, so every id differs; the fp4 arm's runs differ from bf16's in precision.
  for (size_t i = 0; i < plan.runs.size(); ++i)
    for (size_t j = i + 1; j < plan.runs.size(); ++j) CHECK(plan.runs[i].run_id != plan.runs[j].run_id);
  CHECK(plan.runs[4].interventions == "-");  // fp4 vs bf16 at the same model: precisions only
}

TEST_CASE("a model mapping in an arm merges key by key over the base's shape") {
  const char* text = R"(name: deeper
base:
  model: {d_model: 64, n_layers: 2, n_heads: 4, n_kv_heads: 2, ffn_hidden: 192}
  data: {seq_len: 64}
  train: {global_batch_tokens: 1024, max_tokens: 1e5}
arms:
  shallow: {}
  deep: {model: {n_layers: 4}}
  preset: {model: llama-5m}
)";
  const Plan plan = expand_recipe(parse_recipe(text, "deeper.yaml"));
  REQUIRE(plan.runs.size() == 3);
  CHECK(plan.runs[1].config.model.custom->n_layers == 4);
  CHECK(plan.runs[1].config.model.custom->d_model == 64);
  CHECK(plan.runs[1].interventions == "model d64-L4-h4/2-f192");
  CHECK(plan.runs[2].interventions == "model llama-5m");
}

TEST_CASE("a preset's run id does not depend on custom shapes existing") {
  // The compact JSON writes a preset as the bare name it always was.
  const char* text = R"(name: ids
base:
  model: llama-20m
  data: {seq_len: 64}
  train: {global_batch_tokens: 1024, max_tokens: 1e6}
arms:
  a: {}
)";
  const Plan plan = expand_recipe(parse_recipe(text, "ids.yaml"));
  REQUIRE(plan.runs.size() == 1);
  CHECK(plan.runs[0].config_json["model"] == "llama-20m");
  nlohmann::json without_id = plan.runs[0].config_json;
  without_id.erase("run_id");
  CHECK(without_id.dump().find("\"model\":\"llama-20m\"") != std::string::npos);
}

TEST_CASE("a linked axis sets several paths together: each model with its own budget") {
  const Recipe r = parse_recipe(R"(name: s
base: {data: {seq_len: 64}, train: {global_batch_tokens: 1024}}
arms:
  x: {}
  y: {precision: {wgrad: mxfp4}}
grid:
  scale:
    - {model: smoke,    train.max_tokens: 1e5, eval: {every_tokens: 4096}}
    - {model: llama-5m, train.max_tokens: 4e5, eval: {every_tokens: 16384}}
  seed: [1, 2]
exclude:
  - {arm: y, model: llama-5m, seed: 2}
include:
  - {arm: x, model: llama-5m, seed: 7}
  - {arm: y, model: smoke, train.max_tokens: 2e5, eval: {every_tokens: 8192}, seed: 1}
)",
                                "s.yaml");
  REQUIRE(r.grid.size() == 4);  // model, train.max_tokens, eval, seed
  CHECK(r.grid[0].link == "scale");
  CHECK(r.grid[1].link == "scale");
  CHECK(r.grid[2].link == "scale");
  CHECK(r.grid[3].link.empty());
  CHECK(r.grid[1].path == "train.max_tokens");
  CHECK(r.grid_dimensions() == std::vector<std::vector<size_t>>{{0, 1, 2}, {3}});
  CHECK(r.grid_points() == 4);  // 2 scales × 2 seeds, not 2 × 2 × 2 × 2

  const Plan plan = expand_recipe(r);
  // 2 arms × 4 points = 8, minus y at llama-5m seed 2, plus x at llama-5m seed 7 (its budget
  // from the linked axis) and y at smoke with its own budget.
  REQUIRE(plan.runs.size() == 9);
  for (const RunSpec& run : plan.runs) {
    INFO(run_label(run));
    const bool big = run.config.model == "llama-5m";
    if (run.arm == "y" && run.config.train.seed == 1 && !big &&
        run.config.train.max_tokens == Approx(2e5)) {
      CHECK(run.config.eval.every_tokens == Approx(8192));  // the include's own values
      continue;
    }
    CHECK(run.config.train.max_tokens == Approx(big ? 4e5 : 1e5));
    CHECK(run.config.eval.every_tokens == Approx(big ? 16384 : 4096));
    CHECK_FALSE((run.arm == "y" && big && run.config.train.seed == 2));
  }
  const RunSpec& first = plan.runs[0];
  REQUIRE(first.axes.size() == 4);
  CHECK(first.axes[0].axis == "model");
  CHECK(first.axes[1].axis == "train.max_tokens");
  CHECK(first.axes[2].axis == "eval");
  CHECK(first.axes[3].axis == "seed");
  CHECK(first.where("train.max_tokens") == Location{8, 43});  // the linked value itself
  CHECK(first.where("eval.every_tokens") == Location{8, 69});
  const RunSpec& added = plan.runs[7];  // include[0]: the linked axis' other paths follow model
  CHECK(added.arm == "x");
  CHECK(added.config.model == "llama-5m");
  CHECK(added.config.train.seed == 7);
  CHECK(added.config.train.max_tokens == Approx(4e5));
  CHECK(plan.axis_names ==
        std::vector<std::string>{"model", "train.max_tokens", "eval", "seed"});
  // An include naming a linked value that is not in the grid adds nothing: an error.
  CHECK_THROWS_WITH(parse_and_expand(R"(name: s
base: {data: {seq_len: 64}, train: {global_batch_tokens: 1024}}
arms: {x: {}}
grid:
  scale: [{model: smoke, train.max_tokens: 1e5}]
include:
  - {arm: x, model: llama-5m}
)"),
                    "s.yaml:7:5: include[0]: adds no run");
  // A linked value that cannot run is reported at that value.
  const std::string error = error_of(R"(name: s
base: {data: {seq_len: 64}, train: {global_batch_tokens: 1024}}
arms: {x: {}}
grid:
  scale: [{model: smoke, train.max_tokens: -5}]
)");
  CHECK(error.rfind("s.yaml:5:44: train.max_tokens:", 0) == 0);
  CHECK(contains(error, "set by grid axis 'train.max_tokens'"));
}

// The scale study's recipe: the paper's arms × three models × three seeds, each model with its
// own budget.
TEST_CASE("the scale recipe plans the paper's arms at three models, budgets by model") {
  const std::filesystem::path file = kRecipesDir / "paper-arms-scales.yaml";
  const std::string text = read_file(file);
  const Recipe r = parse_recipe(text, file.string());
  const Recipe paper = load_recipe((kRecipesDir / "paper-arms-20m.yaml").string());
  REQUIRE(r.arms.size() == paper.arms.size());
  for (size_t i = 0; i < r.arms.size(); ++i) {
    CHECK(r.arms[i].name == paper.arms[i].name);
    CHECK(r.arms[i].overrides.value == paper.arms[i].overrides.value);
  }
  const Plan plan = expand_recipe(r);
  REQUIRE(plan.runs.size() == 7 * 3 * 3);
  std::map<std::string, std::set<double>> budgets;
  std::map<std::string, int> runs_of;
  for (const RunSpec& run : plan.runs) {
    budgets[mxablate::contract::model_label(run.config.model)].insert(run.config.train.max_tokens);
    ++runs_of[mxablate::contract::model_label(run.config.model)];
    // Evaluation and warm-up scale with the budget: 2 % of it.
    CHECK(run.config.eval.every_tokens == Approx(0.02 * run.config.train.max_tokens));
    CHECK(run.config.train.warmup_tokens == Approx(0.02 * run.config.train.max_tokens));
    CHECK(run.config.eval.tokens == Approx(98304));  // the default corpus's validation holds it
  }
  CHECK(budgets == std::map<std::string, std::set<double>>{
                       {"llama-20m", {100e6}}, {"llama-125m", {600e6}}, {"llama-350m", {1.7e9}}});
  CHECK(runs_of == std::map<std::string, int>{
                       {"llama-20m", 21}, {"llama-125m", 21}, {"llama-350m", 21}});
  CHECK(plan.target["from_arm"] == "fp8");
  // Each run is described against fp8 at its own model and seed: only the arm's numerics differ.
  for (const RunSpec& run : plan.runs)
    if (run.arm == "fp8" || run.arm == "F") CHECK(run.interventions == "-");
}

TEST_CASE("launch order: longest-first puts the most tokens × parameters first, ties in plan order") {
  const Plan plan = expand_recipe(load_recipe((kRecipesDir / "paper-arms-scales.yaml").string()));
  REQUIRE(plan.runs.size() == 63);
  std::vector<std::string> planned;
  for (const RunSpec& run : plan.runs) planned.push_back(run.run_id);
  CHECK(launch_order(plan, LaunchOrder::kPlan) == planned);
  std::map<std::string, const RunSpec*> by_id;
  for (const RunSpec& run : plan.runs) by_id[run.run_id] = &run;
  for (const std::map<std::string, int64_t>& vocab :
       {std::map<std::string, int64_t>{}, std::map<std::string, int64_t>{{"default", 32000}}}) {
    const std::vector<std::string> order = launch_order(plan, LaunchOrder::kLongestFirst, vocab);
    REQUIRE(order.size() == planned.size());
    CHECK(std::set<std::string>(order.begin(), order.end()) ==
          std::set<std::string>(planned.begin(), planned.end()));
    // In plan order (arms outermost) llama-350m's runs are spread over the whole sweep: the last
    // one is the 61st. Longest first, its 21 runs come first, then llama-125m's, then llama-20m's,
    // each model's runs in plan order.
    const std::vector<std::string> models{"llama-350m", "llama-125m", "llama-20m"};
    for (size_t i = 0; i < order.size(); ++i) {
      const RunSpec& run = *by_id.at(order[i]);
      CHECK(mxablate::contract::model_label(run.config.model) == models[i / 21]);
      if (i % 21 != 0) {
        const RunSpec& before = *by_id.at(order[i - 1]);
        CHECK(std::find(planned.begin(), planned.end(), before.run_id) <
              std::find(planned.begin(), planned.end(), run.run_id));
      }
    }
  }
  // Fewer tokens on more parameters can be less work: llama-20m for 100 M tokens (21.9 M
  // parameters at a 4096-token vocabulary) before llama-125m for 10 M (119.6 M).
  const Plan small = parse_and_expand(R"(name: o
base: {data: {seq_len: 64}, train: {global_batch_tokens: 1024}}
arms: {A: {}, B: {train: {lr: 2e-3}}}
grid:
  scale:
    - {model: llama-125m, train.max_tokens: 10e6}
    - {model: llama-20m, train.max_tokens: 100e6}
)");
  REQUIRE(small.runs.size() == 4);  // A 125m, A 20m, B 125m, B 20m
  CHECK(predicted_work(small.runs[1], 4096) == Approx(100e6 * 21.9e6).epsilon(0.01));
  CHECK(predicted_work(small.runs[0], 4096) == Approx(10e6 * 119.6e6).epsilon(0.01));
  // Without the vocabulary, what lies outside the embeddings.
  CHECK(predicted_work(small.runs[0], std::nullopt) < predicted_work(small.runs[0], 4096));
  CHECK(launch_order(small, LaunchOrder::kLongestFirst, {{"default", 4096}}) ==
        std::vector<std::string>{small.runs[1].run_id, small.runs[3].run_id, small.runs[0].run_id,
                                 small.runs[2].run_id});
}

TEST_CASE("activation checkpointing is a schema key of its own type and never an intervention") {
  using Mode = mxablate::contract::Recompute::Mode;
  const std::string head = R"(name: c
base: {model: smoke, data: {seq_len: 64}, train: {global_batch_tokens: 1024}}
target: {from_arm: plain, at_fraction: 0.8}
)";
  const Plan plan = expand_recipe(parse_recipe(head + R"(arms:
  plain: {}
  checkpointed: {train: {activation_checkpointing: true}}
  ceil: {train: {activation_checkpointing: true}, quant: {scale_rule: ceil}}
  auto: {train: {activation_checkpointing: auto}}
  first: {train: {activation_checkpointing: 1}}
)", "c.yaml"));
  REQUIRE(plan.runs.size() == 5);
  CHECK(plan.runs[0].config.train.activation_checkpointing.mode == Mode::kNone);
  CHECK_FALSE(plan.runs[0].config_json["train"].contains("activation_checkpointing"));
  CHECK(plan.runs[1].config.train.activation_checkpointing.mode == Mode::kAll);
  CHECK(plan.runs[1].config_json["train"]["activation_checkpointing"] == true);
  CHECK(plan.runs[1].interventions == "-");
  CHECK(plan.runs[2].interventions == "scale_rule ceil");
  CHECK(plan.runs[3].config_json["train"]["activation_checkpointing"] == "auto");
  CHECK(plan.runs[3].interventions == "-");
  CHECK(plan.runs[4].config.train.activation_checkpointing.first_blocks == 1);
  CHECK(plan.runs[4].config_json["train"]["activation_checkpointing"] == 1);
  CHECK(plan.runs[4].interventions == "-");
  CHECK(plan.runs[0].run_id != plan.runs[1].run_id);  // a config of its own, like device
  CHECK(plan.runs[3].run_id != plan.runs[1].run_id);
  // The schema leaves its type to the contract's reader (several types are valid), which
  // refuses anything else at the value.
  CHECK_THROWS_WITH(expand_recipe(parse_recipe(
                        head + "arms:\n  plain: {train: {activation_checkpointing: some}}\n", "c.yaml")),
                    "c.yaml:5:45: train.activation_checkpointing: expected true, false, auto, selective, "
                    "selective+N (N blocks recomputed whole besides) or a number of blocks from 0 to "
                    "4096, got \"some\" (set in arm 'plain'; run: arm plain)");
  // More blocks than the model has: refused where the model is known.
  CHECK_THROWS_WITH(expand_recipe(parse_recipe(
                        head + "arms:\n  plain: {train: {activation_checkpointing: 3}}\n", "c.yaml")),
                    "c.yaml:5:45: train.activation_checkpointing: 3 blocks, more than the 2 of "
                    "model smoke (true recomputes every block) (set in arm 'plain'; run: arm plain)");
}

TEST_CASE("the paper grid recipe: 5 arms × 3 seeds at llama-20m with the benchmark's settings") {
  const Recipe r = load_recipe((kRecipesDir / "paper-grid-20m.yaml").string());
  const Plan plan = expand_recipe(r);
  REQUIRE(plan.runs.size() == 15);
  std::vector<std::string> arms;
  for (const RunSpec& s : plan.runs)
    if (arms.empty() || arms.back() != s.arm) arms.push_back(s.arm);
  CHECK(arms == std::vector<std::string>{"fp8", "F", "FD", "FDW", "FDW+H16"});
  for (const RunSpec& s : plan.runs) {
    INFO(run_label(s));
    CHECK(mxablate::contract::model_label(s.config.model) == "llama-20m");
    CHECK(s.config.device == mxablate::contract::Device::kCUDA);
    CHECK(s.config.data.seq_len == 256);
    CHECK(s.config.train.global_batch_tokens == 16384);
    CHECK(s.config.train.max_tokens == Approx(8.2e6));
    CHECK(s.config.train.lr == Approx(2e-3));
    CHECK(s.config.train.warmup_tokens == Approx(1.6e6));
    CHECK(s.config.eval.every_tokens == Approx(0.8e6));
    CHECK(s.config.eval.tokens == Approx(391 * 256));  // 100 k rounded to whole sequences
  }
  const RunSpec& h16 = plan.runs.back();
  CHECK(h16.arm == "FDW+H16");
  CHECK(h16.config.train.seed == 3);
  CHECK(name_of(h16.config.precision.wgrad) == "mxfp4");
  CHECK(h16.config.quant.hadamard.size == 16);
  CHECK(name_of(plan.runs[0].config.precision.fprop) == "fp8");
}
