// The SQL views on a sweep over two models (docs/design.md §6, "Views"): each run gets its own
// model's target (block_targets), NULL where none is known yet; tokens to target by the analysis'
// rule; arm_summary per (model, arm) with the paired extra-token median, range and lower bounds.
// The rows are checked against figures computed by hand, and against the analysis library on
// the same store.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "catch.h"
#include "mxablate/analysis/curves.h"
#include "mxablate/analysis/model_blocks.h"
#include "mxablate/contract/run_config.h"
#include "mxablate/results/ingest.h"
#include "mxablate/results/schema.h"
#include "mxablate/results/sqlite_db.h"
#include "mxablate/results/store.h"
#include "temp_dir.h"

using namespace mxablate;
using namespace mxablate::results;
using mxablate::testing::TempDir;
using nlohmann::json;

namespace {

struct HandRun {
  const char* id;
  const char* model;
  const char* arm;
  int seed;
  const char* status;
  int64_t tokens;                             // what it trained
  std::vector<std::optional<double>> losses;  // at 100, 200, …; nullopt: a NaN, stored as NULL
};

// Budget 400 tokens for every run; evaluations every 100.
// m-small, target 3.0:
//   fp8 s1: 3.5 → 2.9 between 200 and 300: 200 + 0.5/0.6·100 = 283.33
//   fp8 s2: 3.0 at 200, the evaluation before at 4.0: exactly 200
//   mx  s1: never at or below 3.0, budget exhausted: at least 400 → +41.18 % (lower bound)
//   mx  s2: 3.2 → 2.6 between 300 and 400: 333.33 → +66.67 %
// m-large, target 2.5:
//   fp8 s1: 2.4 at the first evaluation: 100
//   fp8 s2: 2.7 → 2.5 at 300: exactly 300
//   mx  s1: a NaN at 200 ends the curve (2.0 at 300 does not count); diverged: censored at its
//           budget, 400 → +300 % (lower bound)
//   mx  s2: stopped as projected not to reach at 200 tokens: censored at its budget, 400 →
//           +33.33 % (lower bound)
const std::vector<HandRun> kHandRuns = {
    {"s-fp8-1", "m-small", "fp8", 1, "converged", 400, {4.0, 3.5, 2.9, 2.8}},
    {"s-fp8-2", "m-small", "fp8", 2, "converged", 400, {4.0, 3.0, 2.9, 2.7}},
    {"s-mx-1", "m-small", "mx", 1, "budget_exhausted", 400, {4.0, 3.6, 3.2, 3.1}},
    {"s-mx-2", "m-small", "mx", 2, "converged", 400, {4.2, 3.8, 3.2, 2.6}},
    {"l-fp8-1", "m-large", "fp8", 1, "converged", 400, {2.4, 2.3, 2.2, 2.1}},
    {"l-fp8-2", "m-large", "fp8", 2, "converged", 400, {3.0, 2.7, 2.5, 2.4}},
    {"l-mx-1", "m-large", "mx", 1, "diverged", 200, {3.0, std::nullopt, 2.0, 1.9}},
    {"l-mx-2", "m-large", "mx", 2, "projected_not_reached", 200, {3.0, 2.9}},
};

int64_t build_hand_sweep(ResultsStore& store) {
  SweepRecord s;
  s.name = "two-models";
  s.recipe_path = "two.yaml";
  s.recipe_text = "name: two-models";
  s.runs_dir = "runs";
  s.target = {{"from_arm", "fp8"}, {"at_fraction", 0.5}};
  const int64_t id = store.register_sweep(s);
  std::vector<PlannedRun> plan;
  for (const HandRun& r : kHandRuns) {
    PlannedRun p;
    p.run_id = r.id;
    p.arm = r.arm;
    p.arm_index = std::string(r.arm) == "fp8" ? 0 : 1;
    // m-small's label comes from the config's preset name, m-large's from the planner.
    const bool small = std::string(r.model) == "m-small";
    p.config_json = small ? json({{"model", r.model}}).dump() : "{}";
    p.model = small ? "" : r.model;
    p.run_dir = std::string("runs/") + r.id;
    p.max_tokens = 400;
    p.axes = {{"model", json(r.model).dump()}, {"seed", std::to_string(r.seed)}};
    plan.push_back(p);
  }
  store.register_plan(id, plan);
  Statement eval(store.db(),
                 "INSERT INTO evals (run_id, seq, step, tokens, val_loss) VALUES (?1, ?2, ?2, ?3, ?4)");
  Statement ran(store.db(), "UPDATE runs SET tokens = ?2 WHERE run_id = ?1");
  for (const HandRun& r : kHandRuns) {
    for (size_t i = 0; i < r.losses.size(); ++i) {
      eval.bind(1, r.id).bind(2, static_cast<int64_t>(i + 1)).bind(3, static_cast<int64_t>(100 * (i + 1)));
      eval.bind(4, r.losses[i]);
      eval.run();
    }
    ran.bind(1, r.id).bind(2, r.tokens).run();
    store.set_status(r.id, r.status);
  }
  return id;
}

std::optional<double> opt_double(const Statement& st, int i) {
  return st.is_null(i) ? std::nullopt : std::optional<double>(st.get_double(i));
}

struct ExtraRow {
  std::string model, baseline_run_id;
  std::optional<double> target, tokens_to_target, extra_pct, lower_bound;
};

std::map<std::string, ExtraRow> extra_rows(Database& db) {
  Statement st(db,
               "SELECT run_id, model, baseline_run_id, target, tokens_to_target, "
               "extra_tokens_pct, lower_bound FROM run_extra_tokens");
  std::map<std::string, ExtraRow> out;
  while (st.step())
    out[st.get_text(0)] = {st.get_text(1), st.is_null(2) ? "" : st.get_text(2),
                           opt_double(st, 3), opt_double(st, 4), opt_double(st, 5),
                           opt_double(st, 6)};
  return out;
}

}  // namespace

TEST_CASE("on a sweep over two models each run is measured against its own model's target") {
  TempDir dir;
  ResultsStore store(dir.file("a.db"));
  const int64_t id = build_hand_sweep(store);

  // No target fixed yet for either model: every figure that needs one is NULL, not a number.
  for (const auto& [run, row] : extra_rows(store.db())) {
    INFO(run);
    CHECK_FALSE(row.target);
    CHECK_FALSE(row.tokens_to_target);
    CHECK_FALSE(row.extra_pct);
    CHECK_FALSE(row.lower_bound);
  }

  // m-small's target is fixed; m-large's not yet.
  store.set_block_target(id, "m-small", 3.0, "median of arm fp8 at 50 % of its budget");
  auto rows = extra_rows(store.db());
  REQUIRE(rows.size() == 8);
  CHECK(rows["s-fp8-1"].model == "m-small");
  CHECK(*rows["s-fp8-1"].target == 3.0);
  CHECK(*rows["s-fp8-1"].tokens_to_target == Approx(200 + 0.5 / 0.6 * 100));
  CHECK(*rows["s-fp8-2"].tokens_to_target == Approx(200));
  CHECK_FALSE(rows["s-mx-1"].tokens_to_target);
  CHECK(rows["s-mx-1"].baseline_run_id == "s-fp8-1");
  CHECK(*rows["s-mx-1"].extra_pct == Approx(100.0 * (400 / (200 + 0.5 / 0.6 * 100) - 1)));
  CHECK(*rows["s-mx-1"].lower_bound == 1);
  CHECK(*rows["s-mx-2"].tokens_to_target == Approx(300 + 0.2 / 0.6 * 100));
  CHECK(*rows["s-mx-2"].extra_pct == Approx(100.0 * ((300 + 0.2 / 0.6 * 100) / 200 - 1)));
  CHECK(*rows["s-mx-2"].lower_bound == 0);
  CHECK(rows["l-mx-1"].model == "m-large");
  CHECK_FALSE(rows["l-mx-1"].target);
  CHECK_FALSE(rows["l-mx-1"].extra_pct);
  CHECK_FALSE(rows["l-mx-1"].lower_bound);

  store.set_block_target(id, "m-large", 2.5, "median of arm fp8 at 50 % of its budget");
  rows = extra_rows(store.db());
  CHECK(*rows["l-fp8-1"].tokens_to_target == Approx(100));
  CHECK(*rows["l-fp8-2"].tokens_to_target == Approx(300));
  CHECK_FALSE(rows["l-mx-1"].tokens_to_target);  // the NaN ended its curve before 2.0
  CHECK(rows["l-mx-1"].baseline_run_id == "l-fp8-1");
  CHECK(*rows["l-mx-1"].extra_pct == Approx(300.0));
  CHECK(*rows["l-mx-1"].lower_bound == 1);
  CHECK(*rows["l-mx-2"].extra_pct == Approx(100.0 * (400.0 / 300 - 1)));
  CHECK(*rows["l-mx-2"].lower_bound == 1);

  // arm_summary: one row per (model, arm), models in plan order, arms in recipe order.
  Statement st(store.db(),
               "SELECT model, arm, runs, n, median_extra_tokens_pct, range_low_pct, "
               "range_high_pct, lower_bounds, projected_not_reached, diverged, converged, "
               "median_at_least "
               "FROM arm_summary WHERE sweep = 'two-models'");
  struct Summary {
    const char* model;
    const char* arm;
    int n;
    double median, low, high;
    int lower_bounds, projected, diverged, converged, median_at_least;
  };
  const double s1 = 100.0 * (400 / (200 + 0.5 / 0.6 * 100) - 1);
  const double s2 = 100.0 * ((300 + 0.2 / 0.6 * 100) / 200 - 1);
  const double l2 = 100.0 * (400.0 / 300 - 1);
  const Summary expected[] = {
      {"m-small", "fp8", 2, 0, 0, 0, 0, 0, 0, 2, 0},
      // The censored s1 sits at the median: raising it would raise the median.
      {"m-small", "mx", 2, (s1 + s2) / 2, s1, s2, 1, 0, 0, 1, 1},
      {"m-large", "fp8", 2, 0, 0, 0, 0, 0, 0, 2, 0},
      {"m-large", "mx", 2, (300 + l2) / 2, l2, 300, 2, 1, 1, 0, 1},
  };
  for (const Summary& e : expected) {
    INFO(e.model << " " << e.arm);
    REQUIRE(st.step());
    CHECK(st.get_text(0) == e.model);
    CHECK(st.get_text(1) == e.arm);
    CHECK(st.get_int(2) == 2);
    CHECK(st.get_int(3) == e.n);
    CHECK(st.get_double(4) == Approx(e.median).margin(1e-9));
    CHECK(st.get_double(5) == Approx(e.low).margin(1e-9));
    CHECK(st.get_double(6) == Approx(e.high).margin(1e-9));
    CHECK(st.get_int(7) == e.lower_bounds);
    CHECK(st.get_int(8) == e.projected);
    CHECK(st.get_int(9) == e.diverged);
    CHECK(st.get_int(10) == e.converged);
    CHECK(st.get_int(11) == e.median_at_least);
  }
  CHECK_FALSE(st.step());
}

TEST_CASE("a single-model sweep without a block target uses the sweep's, and a fixed target holds "
          "for every model") {
  TempDir dir;
  ResultsStore store(dir.file("a.db"));
  const auto add_sweep = [&](const std::string& name, const json& target,
                             std::optional<double> stored,
                             const std::vector<std::string>& models) {
    SweepRecord s;
    s.name = name;
    s.recipe_path = name + ".yaml";
    s.recipe_text = "name: " + name;
    s.runs_dir = "runs";
    s.target = target;
    s.target_val_loss = stored;
    const int64_t id = store.register_sweep(s);
    std::vector<PlannedRun> plan;
    for (const std::string& m : models) {
      PlannedRun p;
      p.run_id = name + "-" + m;
      p.arm = "fp8";
      p.config_json = json({{"model", m}}).dump();
      p.run_dir = "runs/" + p.run_id;
      p.max_tokens = 400;
      plan.push_back(p);
    }
    store.register_plan(id, plan);
    return id;
  };
  add_sweep("single", {{"from_arm", "fp8"}}, std::nullopt, {"m-small"});
  CHECK(store.store_resolved_target("single", 3.25));
  add_sweep("fixed", {{"val_loss", 3.5}}, 3.5, {"m-small", "m-large"});
  // A multi-model sweep whose from_arm target somehow has a stored value: not the runs' target.
  add_sweep("derived", {{"from_arm", "fp8"}}, 9.0, {"m-small", "m-large"});
  Statement st(store.db(), "SELECT run_id, target, target_source FROM run_targets ORDER BY run_id");
  std::map<std::string, std::pair<std::optional<double>, std::string>> got;
  while (st.step()) got[st.get_text(0)] = {opt_double(st, 1), st.is_null(2) ? "NULL" : st.get_text(2)};
  CHECK(got["single-m-small"].first == 3.25);
  CHECK(got["single-m-small"].second == "sweep");
  CHECK(got["fixed-m-small"].first == 3.5);
  CHECK(got["fixed-m-large"].first == 3.5);
  CHECK_FALSE(got["derived-m-small"].first);
  CHECK(got["derived-m-large"].second == "NULL");
}

namespace {

// Two models × fp8, FDW × three seeds, as the trainer would report them: configs the analysis
// reads, evaluations every 1000 tokens from the loss `start` falling 0.3 per evaluation, the
// budget 10000. FDW lags fp8 by `lag` nats; the seeds start 0.1 apart. llama-20m's FDW seeds 2
// and 3 never reach the target (its median is a lower bound); llama-5m's FDW seed 3 neither (its
// median stays exact).
void build_analysis_sweep(ResultsStore& store) {
  SweepRecord sweep{"compare", "compare.yaml", "name: compare", "runs", json::object(),
                    std::nullopt};
  sweep.target = {{"from_arm", "fp8"}, {"at_fraction", 0.5}};
  const int64_t sweep_id = store.register_sweep(sweep);
  struct M {
    const char* name;
    double start, lag;
  };
  const M models[] = {{"llama-5m", 9.0, 0.25}, {"llama-20m", 8.0, 0.4}};
  const char* arms[] = {"fp8", "FDW"};
  std::vector<PlannedRun> plan;
  for (const M& m : models)
    for (int a = 0; a < 2; ++a)
      for (int seed = 1; seed <= 3; ++seed) {
        contract::RunConfig c;
        c.arm = arms[a];
        c.model = m.name;
        c.train.seed = static_cast<uint64_t>(seed);
        c.train.max_tokens = 10000;
        const auto p = a == 0 ? contract::GemmPrecision::kFP8 : contract::GemmPrecision::kMXFP4;
        c.precision = {p, p, p};
        const std::string id = fmt::format("{}-{}-{}", arms[a], m.name, seed);
        PlannedRun r{id, arms[a], a, contract::to_json(c).dump(), "runs/" + id, 10000,
                     {{"model", json(m.name).dump()}, {"seed", std::to_string(seed)}}};
        r.model = contract::model_label(c.model);
        plan.push_back(r);
      }
  store.register_plan(sweep_id, plan);
  for (const M& m : models)
    for (int a = 0; a < 2; ++a)
      for (int seed = 1; seed <= 3; ++seed) {
        const std::string id = fmt::format("{}-{}-{}", arms[a], m.name, seed);
        const bool stuck =
            a == 1 && (seed == 3 || (seed == 2 && std::string(m.name) == "llama-20m"));
        std::vector<json> events;
        int64_t seq = 0;
        for (int k = 1; k <= 10; ++k) {
          const double loss = stuck ? m.start + 1.0 - 0.05 * k
                                    : m.start + 0.1 * (seed - 1) + (a ? m.lag : 0.0) - 0.3 * k;
          events.push_back({{"seq", ++seq}, {"kind", "eval"}, {"step", k},
                            {"tokens", 1000 * k}, {"val_loss", loss}, {"time", 0.0}});
        }
        ingest_events(store.db(), id, events, 1);
        store.set_status(id, status::kBudgetExhausted);
      }
}

}  // namespace

TEST_CASE("the views give the analysis library's figures on the same store") {
  TempDir dir;
  ResultsStore store(dir.file("a.db"));
  build_analysis_sweep(store);
  const analysis::SweepData sweep = analysis::load_sweep(store.db(), "compare");
  const std::vector<analysis::BlockTable> blocks = analysis::analyze_by_model(sweep, "");
  REQUIRE(blocks.size() == 2);
  // What the orchestrator does once a block's target is fixed: store it.
  Statement id(store.db(), "SELECT sweep_id FROM sweeps WHERE name = 'compare'");
  REQUIRE(id.step());
  const int64_t sweep_id = id.get_int(0);
  id.reset();
  for (const analysis::BlockTable& b : blocks) {
    REQUIRE(b.target.val_loss);
    store.set_block_target(sweep_id, b.block.model, *b.target.val_loss, b.target.basis);
  }
  // Per run: tokens to target as the analysis computes it on the run's curve.
  Statement runs(store.db(), "SELECT run_id, model, tokens_to_target FROM run_tokens_to_target");
  int seen = 0;
  while (runs.step()) {
    const std::string run = runs.get_text(0);
    INFO(run);
    const auto block = std::find_if(blocks.begin(), blocks.end(), [&](const auto& b) {
      return b.block.model == runs.get_text(1);
    });
    REQUIRE(block != blocks.end());
    const auto record = std::find_if(sweep.runs.begin(), sweep.runs.end(),
                                     [&](const analysis::RunRecord& r) { return r.run_id == run; });
    REQUIRE(record != sweep.runs.end());
    const auto expected = analysis::tokens_to_target(record->evals, *block->target.val_loss);
    CHECK(expected.has_value() == !runs.is_null(2));
    if (expected) CHECK(runs.get_double(2) == Approx(*expected));
    ++seen;
  }
  CHECK(seen == 12);
  // Per (model, arm): the table's median of the paired costs, and whether it is a lower bound.
  Statement summary(store.db(),
                    "SELECT model, arm, median_extra_tokens_pct, median_at_least, n, "
                    "range_low_pct, range_high_pct, lower_bounds FROM arm_summary");
  int rows = 0;
  while (summary.step()) {
    const std::string model = summary.get_text(0), arm = summary.get_text(1);
    INFO(model << " " << arm);
    const auto block = std::find_if(blocks.begin(), blocks.end(),
                                    [&](const auto& b) { return b.block.model == model; });
    REQUIRE(block != blocks.end());
    const auto row = std::find_if(block->table.begin(), block->table.end(),
                                  [&](const analysis::ArmSummary& a) { return a.arm == arm; });
    REQUIRE(row != block->table.end());
    REQUIRE(row->cost.median_pct);
    CHECK(summary.get_double(2) == Approx(*row->cost.median_pct).margin(1e-9));
    CHECK((summary.get_int(3) == 1) == row->cost.lower_bound);
    CHECK(summary.get_int(4) == 3);
    // The range is the lowest and the highest of the per-seed figures the table has.
    REQUIRE(row->cost.per_seed.size() == 3);
    double low = 1e300, high = -1e300;
    int censored = 0;
    for (const analysis::SeedCost& c : row->cost.per_seed) {
      low = std::min(low, c.pct);
      high = std::max(high, c.pct);
      censored += c.at_least;
    }
    CHECK(summary.get_double(5) == Approx(low).margin(1e-9));
    CHECK(summary.get_double(6) == Approx(high).margin(1e-9));
    CHECK(summary.get_int(7) == censored);
    ++rows;
  }
  CHECK(rows == 4);
  // The comparison covers a median that is a lower bound and one that is exact despite a
  // censored seed.
  int at_least = 0, exact_with_censored = 0;
  for (const analysis::BlockTable& b : blocks)
    for (const analysis::ArmSummary& a : b.table) {
      const bool censored = std::any_of(a.cost.per_seed.begin(), a.cost.per_seed.end(),
                                        [](const analysis::SeedCost& c) { return c.at_least; });
      at_least += a.cost.lower_bound;
      exact_with_censored += censored && !a.cost.lower_bound;
    }
  CHECK(at_least == 1);
  CHECK(exact_with_censored == 1);
}

TEST_CASE("a run without a result yet has no cost in the views, as the table leaves it out") {
  // s-mx-1 never reached the target: exhausted, it is a lower bound; interrupted by a deadline,
  // it has no result at all, and "at least what it trained" would be a bound on nothing.
  TempDir dir;
  ResultsStore store(dir.file("a.db"));
  const int64_t id = build_hand_sweep(store);
  store.set_block_target(id, "m-small", 3.0, "median of arm fp8 at 50 % of its budget");
  store.set_status("s-mx-1", "interrupted");
  auto rows = extra_rows(store.db());
  CHECK_FALSE(rows["s-mx-1"].extra_pct);
  CHECK_FALSE(rows["s-mx-1"].lower_bound);
  CHECK(*rows["s-mx-2"].lower_bound == 0);  // a run that reached the target is a result
  Statement st(store.db(),
               "SELECT runs, n, median_extra_tokens_pct, lower_bounds, unfinished "
               "FROM arm_summary WHERE model = 'm-small' AND arm = 'mx'");
  REQUIRE(st.step());
  CHECK(st.get_int(0) == 2);
  CHECK(st.get_int(1) == 1);
  CHECK(st.get_double(2) == Approx(100.0 * ((300 + 0.2 / 0.6 * 100) / 200 - 1)));
  CHECK(st.get_int(3) == 0);
  CHECK(st.get_int(4) == 1);
}
