// run_id: the same resolved runs from differently written recipes hash the same; any real change
// of a value changes exactly the runs it affects.
#include <algorithm>
#include <map>

#include "catch.h"
#include "mxablate/orchestrator/plan.h"
#include "mxablate/orchestrator/recipe.h"
#include "mxablate/orchestrator/run_id.h"

using namespace mxablate::orchestrator;

namespace {

const char* kReference = R"(name: ids
base:
  model: smoke
  data: {seq_len: 64}
  train: {global_batch_tokens: 1024, max_tokens: 1e6, lr: 1e-3}
arms:
  base: {}
  fp4: {precision: {fprop: mxfp4, wgrad: mxfp4}, quant: {stochastic_rounding: [grad]}}
grid:
  seed: [1, 2]
)";

std::map<std::string, std::string> ids_by_label(const std::string& text) {
  const Plan plan = expand_recipe(parse_recipe(text, "r.yaml"));
  std::map<std::string, std::string> out;
  for (const RunSpec& r : plan.runs)
    out[r.arm + "/" + std::to_string(r.config.train.seed)] = r.run_id;
  return out;
}

}  // namespace

TEST_CASE("run ids are 16 hex digits, fixed for a given config") {
  const auto ids = ids_by_label(kReference);
  REQUIRE(ids.size() == 4);
  for (const auto& [label, id] : ids) {
    CHECK(id.size() == 16);
    CHECK(id.find_first_not_of("0123456789abcdef") == std::string::npos);
  }
  // Pinned: a change here means every existing sweep would rerun from scratch, so it must be
  // deliberate (bump the "mxablate-run-v1" prefix and say so).
  CHECK(compute_run_id(nlohmann::json{{"a", 1}}) == compute_run_id(nlohmann::json{{"a", 1}}));
  CHECK(compute_run_id(nlohmann::json{{"a", 1}, {"run_id", "x"}}) ==
        compute_run_id(nlohmann::json{{"a", 1}}));
  CHECK(compute_run_id(nlohmann::json{{"a", 1}}) == "1d6a74a586495a4e");  // = uuid5(ns, "mxablate-run-v1:{\"a\":1}"), checked with Python
  // A preset's config is written as it always was (`"model":"smoke"`): custom model shapes
  // (docs/design.md §4) left every preset run's id as it was.
  CHECK(ids.at("base/1") == "da5b4b2433875f65");
}

TEST_CASE("key order, flow vs block style, number spelling and inheritance do not change ids") {
  const auto reference = ids_by_label(kReference);
  const char* rewritten = R"(# the same runs, written differently
grid:
  seed:
    - 1
    - 2.0
arms:
  base:
    {}
  fp4:
    quant:
      stochastic_rounding: ["grad"]
    precision:
      wgrad: "mxfp4"
      fprop: mxfp4
      dgrad: bf16          # the default, now explicit
base:
  train:
    lr: 0.001
    max_tokens: 1000000
    global_batch_tokens: 1024
    beta1: 0.9             # the default
  data:
    seq_len: 64
  model: "smoke"
name: "ids"
)";
  CHECK(ids_by_label(rewritten) == reference);
}

TEST_CASE("a real change of a value changes the ids of exactly the runs it affects") {
  const auto reference = ids_by_label(kReference);
  struct Change {
    const char* from;
    const char* to;
    std::vector<std::string> affected;
  };
  const std::vector<Change> changes{
      {"lr: 1e-3", "lr: 2e-3", {"base/1", "base/2", "fp4/1", "fp4/2"}},
      {"max_tokens: 1e6", "max_tokens: 2e6", {"base/1", "base/2", "fp4/1", "fp4/2"}},
      {"seed: [1, 2]", "seed: [1, 3]", {"base/2", "fp4/2"}},
      {"wgrad: mxfp4}", "wgrad: nvfp4}", {"fp4/1", "fp4/2"}},
      {"[grad]", "[grad, weight]", {"fp4/1", "fp4/2"}},
      {"name: ids", "name: ids2", {"base/1", "base/2", "fp4/1", "fp4/2"}},
      {"base: {}", "base: {eval: {every_tokens: 50000}}", {"base/1", "base/2"}},
  };
  for (const Change& c : changes) {
    INFO(c.from << " → " << c.to);
    std::string text = kReference;
    const size_t at = text.find(c.from);
    REQUIRE(at != std::string::npos);
    text.replace(at, std::string(c.from).size(), c.to);
    const auto changed = ids_by_label(text);
    for (const auto& [label, id] : reference) {
      INFO(label);
      const bool affected =
          std::find(c.affected.begin(), c.affected.end(), label) != c.affected.end();
      const auto it = changed.find(label);
      if (it == changed.end()) {
        CHECK(affected);  // the run no longer exists (seed 2 → 3): counted as changed
        continue;
      }
      CHECK((it->second != id) == affected);
    }
  }
}

TEST_CASE("FP8 delayed scaling changes only the ids of the arms that set it") {
  // docs/design.md §2: a setting added later is written to the identity only when set, so
  // spelling out its default (current scaling) leaves every id as it was.
  const char* fp8_recipe = R"(name: ids
base:
  model: smoke
  data: {seq_len: 64}
  train: {global_batch_tokens: 1024, max_tokens: 1e6, lr: 1e-3}
  precision: {fprop: fp8, dgrad: fp8, wgrad: fp8}
arms:
  fp8: {}
  other: {train: {lr: 2e-3}}
grid:
  seed: [1]
)";
  const auto reference = ids_by_label(fp8_recipe);
  std::string spelled = fp8_recipe;
  spelled.replace(spelled.find("fp8: {}"), 7, "fp8: {quant: {fp8_scaling: current, fp8_amax_history: 1024, fp8_margin: 0}}");
  CHECK(ids_by_label(spelled) == reference);
  std::string delayed = fp8_recipe;
  delayed.replace(delayed.find("fp8: {}"), 7, "fp8: {quant: {fp8_scaling: delayed}}");
  const auto changed = ids_by_label(delayed);
  CHECK(changed.at("fp8/1") != reference.at("fp8/1"));
  CHECK(changed.at("other/1") == reference.at("other/1"));
  std::string window = fp8_recipe;
  window.replace(window.find("fp8: {}"), 7, "fp8: {quant: {fp8_scaling: delayed, fp8_amax_history: 16}}");
  CHECK(ids_by_label(window).at("fp8/1") != changed.at("fp8/1"));
}
