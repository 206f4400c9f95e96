// From a hand-made results database to the table: target resolution from the baseline arm,
// tokens to target, lower bounds for runs that never got there, divergence counts.
#include <cmath>
#include <filesystem>
#include <map>
#include <tuple>

#include "catch.h"
#include "mxablate/analysis/sweep_analysis.h"
#include "mxablate/contract/run_config.h"
#include "mxablate/results/ingest.h"
#include "mxablate/results/store.h"
#include "process_util.h"

using namespace mxablate;
using nlohmann::json;

namespace {

// Evaluations every 1000 tokens to 10000: loss = start - 0.5 per 1000 tokens.
std::vector<json> linear_evals(double start, int last_k, int64_t& seq) {
  std::vector<json> events;
  for (int k = 1; k <= last_k; ++k)
    events.push_back({{"seq", ++seq}, {"kind", "eval"}, {"step", 10 * k}, {"tokens", 1000 * k},
                      {"val_loss", start - 0.5 * k}, {"time", 0.0}});
  return events;
}

struct Arm {
  const char* name;
  const char* precision;
  bool sr;
};

void build_database(const std::string& path) {
  results::ResultsStore store(path);
  results::SweepRecord sweep{"golden",       "golden.yaml",  "name: golden",
                            "runs",         json::object(), std::nullopt};
  sweep.target = {{"from_arm", "fp8"}, {"at_fraction", 0.8}};
  const int64_t sweep_id = store.register_sweep(sweep);
  std::vector<results::PlannedRun> plan;
  const Arm arms[] = {{"fp8", "fp8", false}, {"FDW", "mxfp4", false}, {"FDW+SR", "mxfp4", true}};
  for (int a = 0; a < 3; ++a) {
    for (int seed = 1; seed <= 2; ++seed) {
      contract::RunConfig c;
      c.arm = arms[a].name;
      c.train.seed = static_cast<uint64_t>(seed);
      c.train.max_tokens = 10000;
      const contract::GemmPrecision p = *contract::parse_gemm_precision(arms[a].precision);
      c.precision = {p, p, p};
      if (arms[a].sr) c.quant.stochastic_rounding = {contract::OperandClass::kGrad};
      const std::string id = std::string(arms[a].name) + "-" + std::to_string(seed);
      plan.push_back({id, arms[a].name, a, contract::to_json(c).dump(), "runs/" + id, 10000,
                      {{"seed", std::to_string(seed)}}});
    }
  }
  store.register_plan(sweep_id, plan);

  auto ingest = [&](const std::string& id, std::vector<json> events, const std::string& status) {
    results::ingest_events(store.db(), id, events, 1);
    store.set_status(id, status);
  };
  int64_t seq = 0;
  // Baseline: 10 - 0.5k and 10.2 - 0.5k; at 8000 tokens (80 %) 6.0 and 6.2: target 6.1,
  // reached at 7800 and 8200 tokens (median 8000).
  ingest("fp8-1", linear_evals(10.0, 10, seq = 0), "budget_exhausted");
  ingest("fp8-2", linear_evals(10.2, 10, seq = 0), "budget_exhausted");
  // FDW reaches 6.1 at 8600 and 9000; against the baseline run of the same seed (7800, 8200):
  // +10.256 % and +9.756 %, median +10.006 %.
  ingest("FDW-1", linear_evals(10.4, 10, seq = 0), "budget_exhausted");
  ingest("FDW-2", linear_evals(10.6, 10, seq = 0), "budget_exhausted");
  // FDW+SR: seed 1 diverges at 3000 tokens (censored at its 10000-token budget: >= 10000/7800
  // - 1 = +28.205 %), seed 2 reaches the target at 9800 (9800/8200 - 1 = +19.512 %): median
  // >= +23.859 %.
  auto diverging = linear_evals(11.0, 2, seq = 0);
  diverging.push_back({{"seq", ++seq}, {"kind", "divergence"}, {"step", 30}, {"tokens", 3000},
                       {"reason", "nonfinite_loss"}, {"value", nullptr}, {"severity", "fatal"},
                       {"time", 0.0}});
  ingest("FDW+SR-1", diverging, "diverged");
  ingest("FDW+SR-2", linear_evals(11.0, 10, seq = 0), "budget_exhausted");
}

}  // namespace

TEST_CASE("table from a hand-made database") {
  test::TempDir dir("mxablate_sweep_analysis");
  const std::string path = dir / "golden.db";
  build_database(path);
  results::Database db(path, results::Database::Mode::kReadOnly);
  const analysis::SweepData sweep = analysis::load_sweep(db, "golden");
  REQUIRE(sweep.groups == std::vector<std::string>{"fp8", "FDW", "FDW+SR"});

  const analysis::ResolvedTarget target = analysis::resolve_target(sweep);
  REQUIRE(target.val_loss.has_value());
  CHECK(*target.val_loss == Approx(6.1));
  CHECK(target.description ==
        "target val loss 6.1000 (perplexity 445.86): median of arm fp8 at 80 % of its 1e+04-token "
        "budget; the baseline's median loss fell a further 16.4 % by the end of its budget (still "
        "falling at the target)");  // 5.0 and 5.2 at 10000 tokens: (6.1 - 5.1) / 6.1

  const std::string baseline = analysis::baseline_group(sweep, "");
  CHECK(baseline == "fp8");
  const auto rows = analysis::summarize(sweep, baseline, target);
  REQUIRE(rows.size() == 3);
  CHECK(rows[1].cost.paired);
  CHECK(*rows[1].cost.median_pct == Approx(100.0 * ((8600.0 / 7800 + 9000.0 / 8200) / 2 - 1)));
  CHECK_FALSE(rows[1].cost.lower_bound);
  CHECK(*rows[2].cost.median_pct == Approx(100.0 * ((10000.0 / 7800 + 9800.0 / 8200) / 2 - 1)));
  CHECK(rows[2].cost.lower_bound);
  CHECK(rows[2].diverged == 1);
  CHECK(rows[2].converged == 1);
  CHECK(rows[2].first_divergence_reason == "nonfinite_loss");
  CHECK(*rows[2].final_val_loss == Approx(8.0));  // median of 10.0 (last before NaN) and 6.0

  // Golden Markdown, derived by hand. Two pairs per arm: the interval is their range, named so
  // (FDW [9000/8200 - 1, 8600/7800 - 1] = [+9.8, +10.3]; FDW+SR [9800/8200 - 1, >= 10000/7800 - 1]
  // with its censored upper end marked), and the sign-flip p of two positive costs is 2/4 (an
  // upper bound where a cost is censored).
  const std::string md = analysis::render_table(rows, analysis::TableFormat::kMarkdown, "golden");
  INFO(md);
  const std::string expected_rows =
      "| fp8 | fp8 | fp8 | fp8 | - | baseline | - | - | - | 5.1000 | 2 | 2 | 0 | 0 | baseline (FP8) |\n"
      "| FDW | mxfp4 | mxfp4 | mxfp4 | - | +10.0 % | [+9.8, +10.3] (range, 2 seeds) | 0.500 | 2 | "
      "5.5000 | 2 | 2 | 0 | 0 | +26-27 % |\n"
      "| FDW+SR | mxfp4 | mxfp4 | mxfp4 | SR(grad) | ≥ +23.9 % | [+19.5, ≥ +28.2] (range, 2 seeds) | "
      "≤ 0.500 | 2 | 8.0000 | 2 | 1 | 1 (nonfinite_loss) | 0 | did not converge |\n";
  CHECK(md.substr(md.size() - expected_rows.size()) == expected_rows);
  // The censored run is named with its bound and why it has no projected figure.
  CHECK(md.find("Runs short of the target: FDW+SR seed=1: at least +28.2 %, no projection: no "
                "target was known while it trained.") != std::string::npos);

  const std::string csv = analysis::render_table(rows, analysis::TableFormat::kCsv, "");
  CHECK(csv.find("\nFDW,mxfp4,mxfp4,mxfp4,-,false,10.006") != std::string::npos);
  CHECK(csv.find("\nFDW+SR,mxfp4,mxfp4,mxfp4,SR(grad),false,23.858") != std::string::npos);
  const std::string tex = analysis::render_table(rows, analysis::TableFormat::kLatex, "golden");
  CHECK(tex.find("FDW+SR & mxfp4 & mxfp4 & mxfp4 & SR(grad) & $\\geq$ +23.9 \\%") != std::string::npos);

  // An explicit baseline, and an unknown one.
  CHECK(analysis::baseline_group(sweep, "FDW") == "FDW");
  CHECK_THROWS_WITH(analysis::baseline_group(sweep, "bf16"),
                    "--baseline: sweep 'golden' has no arm 'bf16'");
  CHECK_THROWS_WITH(analysis::load_sweep(db, "nope"), path + ": no sweep named 'nope'");
}

TEST_CASE("the report's OCC share is the mean over an arm's records, an older store has none") {
  test::TempDir dir("mxablate_sweep_occ");
  const std::string path = dir / "golden.db";
  build_database(path);
  {
    results::ResultsStore store(path);
    const auto quant = [](int64_t seq, std::optional<double> occ) {
      json e = {{"seq", seq}, {"kind", "quant_stats"}, {"step", 100}, {"tokens", 10000},
                {"layer", 0}, {"gemm", "fprop"}, {"operand", "x"}, {"relative_error", 0.1},
                {"time", 0.0}};
      if (occ) e["occ_fraction"] = *occ;
      return e;
    };
    results::ingest_events(store.db(), "FDW-1", {quant(11, 0.01), quant(12, 0.03), quant(13, {})}, 2);
    results::ingest_events(store.db(), "FDW-2", {quant(11, 0.02)}, 2);
  }
  const auto occ_of = [&](results::Database& db) {
    const analysis::SweepData sweep = analysis::load_sweep(db, "golden");
    const analysis::ResolvedTarget target = analysis::resolve_target(sweep);
    const auto table = analysis::summarize(sweep, analysis::baseline_group(sweep, ""), target);
    return analysis::report_data(sweep, table, target).occ;
  };
  {
    results::Database db(path, results::Database::Mode::kReadOnly);
    const std::vector<analysis::OccShare> occ = occ_of(db);
    REQUIRE(occ.size() == 1);
    CHECK(occ[0].arm == "FDW");
    CHECK(occ[0].records == 3);
    CHECK(occ[0].mean_fraction == Approx(0.02));
  }
  // A store of schema version 3, read as it is (read-only), has no occ_fraction column.
  {
    results::Database db(path, results::Database::Mode::kReadWrite);
    db.exec("ALTER TABLE quant_stats DROP COLUMN occ_fraction", "test");
    db.exec("PRAGMA user_version = 3", "test");
  }
  results::Database db(path, results::Database::Mode::kReadOnly);
  CHECK(occ_of(db).empty());
}

TEST_CASE("the resolved target is stored with the sweep, and the SQL view pairs runs like the table") {
  test::TempDir dir("mxablate_sweep_target");
  const std::string path = dir / "golden.db";
  build_database(path);
  results::ResultsStore store(path);
  const analysis::SweepData before = analysis::load_sweep(store.db(), "golden");
  const std::optional<double> target = analysis::target_to_store(before);
  REQUIRE(target.has_value());  // every fp8 run has ended
  CHECK(*target == Approx(6.1));
  CHECK(store.store_resolved_target("golden", *target));
  CHECK_FALSE(store.store_resolved_target("golden", 7.0));  // stored once
  const analysis::SweepData after = analysis::load_sweep(store.db(), "golden");
  CHECK(*after.stored_target == Approx(6.1));
  CHECK_FALSE(analysis::target_to_store(after).has_value());
  CHECK(analysis::resolve_target(after).description ==
        "target val loss 6.1000 (perplexity 445.86): median of arm fp8 at 80 % of its budget, "
        "stored with the sweep; the baseline's median loss fell a further 16.4 % by the end of its "
        "budget (still falling at the target)");

  // Per run, what the table takes the median of: each run against fp8 of its own seed.
  results::Statement view(store.db(),
                          "SELECT run_id, baseline_run_id, extra_tokens_pct, lower_bound "
                          "FROM run_extra_tokens ORDER BY run_id");
  std::map<std::string, std::tuple<std::string, double, int64_t>> rows;
  while (view.step())
    rows[view.get_text(0)] = {view.get_text(1), view.get_double(2), view.get_int(3)};
  REQUIRE(rows.size() == 6);
  CHECK(std::get<0>(rows["FDW-1"]) == "fp8-1");
  CHECK(std::get<1>(rows["FDW-1"]) == Approx(100.0 * (8600.0 / 7800 - 1)));
  CHECK(std::get<1>(rows["FDW-2"]) == Approx(100.0 * (9000.0 / 8200 - 1)));
  CHECK(std::get<1>(rows["FDW+SR-1"]) == Approx(100.0 * (10000.0 / 7800 - 1)));
  CHECK(std::get<2>(rows["FDW+SR-1"]) == 1);
  CHECK(std::get<1>(rows["fp8-2"]) == Approx(0.0));

  // Registering the same recipe keeps the stored target; a changed target section drops it.
  results::SweepRecord same{"golden",       "golden.yaml",  "name: golden",
                           "runs",         json::object(), std::nullopt};
  same.target = {{"from_arm", "fp8"}, {"at_fraction", 0.8}};
  store.register_sweep(same);
  CHECK(analysis::load_sweep(store.db(), "golden").stored_target.has_value());
  results::SweepRecord changed = same;
  changed.target = {{"from_arm", "fp8"}, {"at_fraction", 0.5}};
  store.register_sweep(changed);
  CHECK_FALSE(analysis::load_sweep(store.db(), "golden").stored_target.has_value());
}

TEST_CASE("with another grid axis, each row is compared with the baseline at the same setting") {
  // fp8 and FDW at two learning rates, one seed each. At lr=2 both are 1000 tokens slower.
  analysis::SweepData sweep;
  sweep.name = "lr";
  sweep.target_spec = {{"val_loss", 6.0}};
  const auto add = [&](const std::string& arm, const std::string& lr, double start) {
    analysis::RunRecord r;
    r.run_id = arm + "-" + lr;
    r.arm = arm;
    r.group = arm + " [train.lr=" + lr + "]";
    r.pair_key = "seed=1";
    r.status = "budget_exhausted";
    r.max_tokens = 10000;
    r.tokens_trained = 10000;
    for (int k = 0; k <= 10; ++k) r.evals.push_back({1000.0 * k, start - 0.5 * k});
    sweep.groups.push_back(r.group);
    sweep.runs.push_back(r);
  };
  add("fp8", "1", 10.0);  // reaches 6.0 at 8000
  add("fp8", "2", 10.5);  // 9000
  add("FDW", "1", 10.4);  // 8800: +10 % against fp8 at lr=1
  add("FDW", "2", 10.9);  // 9800: +8.9 % against fp8 at lr=2 (+22.5 % against lr=1)
  sweep.target_spec["from_arm"] = "fp8";
  CHECK(analysis::baseline_group(sweep, "") == "fp8 [train.lr=1]");
  const auto rows = analysis::summarize(sweep, "fp8 [train.lr=1]", analysis::resolve_target(sweep));
  REQUIRE(rows.size() == 4);
  CHECK(rows[0].is_baseline);
  CHECK(rows[1].is_baseline);  // fp8 at lr=2 is the baseline of its own setting
  CHECK(*rows[2].cost.median_pct == Approx(10.0));
  CHECK(*rows[3].cost.median_pct == Approx(100.0 * (9800.0 / 9000 - 1)));
}

// A database handed over by someone else: values of the wrong JSON type in a run's stored config
// or the sweep's stored target are one error naming the run or sweep and the key, not a JSON
// library exception and not a silent default.
TEST_CASE("a stored config or target of the wrong type is an error naming run, sweep and key") {
  test::TempDir dir("mxablate_sweep_analysis_types");
  int cases = 0;
  std::string path;
  // Each case corrupts a fresh copy of the golden database.
  const auto with = [&](const std::string& sql, const auto& check) {
    path = dir / ("golden" + std::to_string(++cases) + ".db");
    build_database(path);
    {
      results::Database db(path, results::Database::Mode::kReadWriteCreate);
      db.exec(sql);
    }
    results::Database db(path, results::Database::Mode::kReadOnly);
    check(db);
  };
  with("UPDATE runs SET config_json = json_set(config_json, '$.precision.fprop', 5) "
       "WHERE run_id = 'FDW-1'",
       [&](results::Database& db) {
         CHECK_THROWS_WITH(analysis::load_sweep(db, "golden"),
                           path + ": run FDW-1: its stored config: precision.fprop: expected a "
                                  "string, got 5");
       });
  with("UPDATE runs SET config_json = json_set(config_json, '$.train.seed', -3) "
       "WHERE run_id = 'FDW-2'",
       [&](results::Database& db) {
         CHECK_THROWS_WITH(analysis::load_sweep(db, "golden"),
                           path + ": run FDW-2: its stored config: train.seed: must be >= 0, "
                                  "got -3");
       });
  // A setting the table was not written for still shows, and the paper's figure goes away.
  with("UPDATE runs SET config_json = json_set(config_json, '$.quant.scale_rule', 'ceil', "
       "'$.quant.weight_blocks', '2d') WHERE arm = 'FDW'",
       [&](results::Database& db) {
         const analysis::SweepData sweep = analysis::load_sweep(db, "golden");
         const auto rows = analysis::summarize(sweep, "fp8", analysis::resolve_target(sweep));
         REQUIRE(rows.size() == 3);
         CHECK(rows[1].interventions == "scale_rule ceil + weight_blocks 2d");
         CHECK_FALSE(rows[1].paper.has_value());
         CHECK(rows[0].paper == "baseline (FP8)");
         CHECK(rows[2].interventions == "SR(grad)");
         CHECK(rows[2].paper == "did not converge");
       });
  with("UPDATE runs SET config_json = '[1]' WHERE run_id = 'FDW-2'", [&](results::Database& db) {
    CHECK_THROWS_WITH(analysis::load_sweep(db, "golden"),
                      path + ": run FDW-2: its stored config is not a JSON object");
  });
  with("UPDATE sweeps SET target_json = '{\"from_arm\": 7}'", [&](results::Database& db) {
    const analysis::SweepData sweep = analysis::load_sweep(db, "golden");
    CHECK_THROWS_WITH(analysis::resolve_target(sweep),
                      "sweep golden: its stored target has from_arm as number, not a string");
    CHECK_THROWS_WITH(analysis::baseline_group(sweep, ""),
                      "sweep golden: its stored target has from_arm as number, not a string");
  });
  with("UPDATE sweeps SET target_json = '{\"val_loss\": \"4.2\"}'", [&](results::Database& db) {
    CHECK_THROWS_WITH(analysis::resolve_target(analysis::load_sweep(db, "golden")),
                      "sweep golden: its stored target has val_loss as string, not a number");
  });
  with("UPDATE sweeps SET target_json = '\"x\"'", [&](results::Database& db) {
    CHECK_THROWS_WITH(analysis::load_sweep(db, "golden"),
                      path + ": sweep golden: its stored target is not a JSON object");
  });
}

TEST_CASE("a model axis groups runs by the model's label, preset or custom shape") {
  test::TempDir dir("mxablate_sweep_analysis_models");
  const std::string path = dir / "models.db";
  {
    results::ResultsStore store(path);
    results::SweepRecord sweep{"models", "models.yaml", "name: models", "runs", json::object(),
                               std::nullopt};
    sweep.target = {{"val_loss", 6.0}};
    const int64_t sweep_id = store.register_sweep(sweep);
    std::vector<results::PlannedRun> plan;
    contract::RunConfig preset;
    preset.arm = "bf16";
    preset.model = "llama-20m";
    contract::RunConfig shaped = preset;
    shaped.model = contract::ModelChoice::shaped({64, 2, 4, 2, 192, 500000});
    for (const auto& [id, c] : {std::pair{"preset", preset}, std::pair{"shaped", shaped}}) {
      const json config = contract::to_json(c);
      plan.push_back({id, "bf16", 0, config.dump(), std::string("runs/") + id, 1e6,
                      {{"model", config["model"].dump()}}});
    }
    store.register_plan(sweep_id, plan);
  }
  results::Database db(path, results::Database::Mode::kReadOnly);
  const analysis::SweepData sweep = analysis::load_sweep(db, "models");
  CHECK(sweep.groups == std::vector<std::string>{"bf16 [model=llama-20m]",
                                                 "bf16 [model=d64-L2-h4/2-f192-rt500000]"});
}

TEST_CASE("the target's caption says whether the baseline's curve had flattened at the target") {
  // Baseline curves from 1000 to 10000 tokens; the target is the median at 80 % (8000 tokens).
  const auto sweep_with = [](double loss_at_8000, double loss_at_10000) {
    analysis::SweepData s;
    s.name = "flat";
    s.target_spec = {{"from_arm", "fp8"}, {"at_fraction", 0.8}};
    for (int seed = 1; seed <= 2; ++seed) {
      analysis::RunRecord r;
      r.arm = "fp8";
      r.max_tokens = 10000;
      r.evals = {{1000, 8.0}, {8000, loss_at_8000}, {10000, loss_at_10000}};
      s.runs.push_back(r);
    }
    return analysis::resolve_target(s).description;
  };
  // 4.00 → 3.98: 0.5 % further, under 1 %: flattened.
  CHECK(sweep_with(4.0, 3.98) ==
        "target val loss 4.0000 (perplexity 54.60): median of arm fp8 at 80 % of its 1e+04-token "
        "budget; the baseline's median loss fell a further 0.5 % by the end of its budget "
        "(flattened)");
  // 4.00 → 3.80: 5.0 % further: on a slope.
  CHECK(sweep_with(4.0, 3.8) ==
        "target val loss 4.0000 (perplexity 54.60): median of arm fp8 at 80 % of its 1e+04-token "
        "budget; the baseline's median loss fell a further 5.0 % by the end of its budget (still "
        "falling at the target)");
}

TEST_CASE("a run without a result yet is left out of the cost, never counted as a lower bound") {
  // A sweep cut by a deadline: FDW+SR's seed 1 was interrupted short of the target (its status
  // is no result) and a pending run has no curve at all. Counting them "at least what they
  // trained" gave "≥ -100 %" for an arm whose runs had not started.
  test::TempDir dir("mxablate_sweep_analysis");
  const std::string path = dir / "golden.db";
  build_database(path);
  {
    results::ResultsStore store(path);
    store.set_status("FDW+SR-1", "interrupted");
    store.set_status("FDW-2", "pending");
  }
  results::Database db(path, results::Database::Mode::kReadOnly);
  const analysis::SweepData sweep = analysis::load_sweep(db, "golden");
  const analysis::ResolvedTarget target = analysis::resolve_target(sweep);
  const auto rows = analysis::summarize(sweep, analysis::baseline_group(sweep, ""), target);
  REQUIRE(rows.size() == 3);
  // FDW-2's curve reaches the target, so it is a result whatever its status says.
  CHECK(rows[1].cost.per_seed.size() == 2);
  // FDW+SR: only seed 2, exact: 9800/8200 - 1.
  REQUIRE(rows[2].cost.per_seed.size() == 1);
  CHECK(*rows[2].cost.median_pct == Approx(100.0 * (9800.0 / 8200 - 1)));
  CHECK_FALSE(rows[2].cost.lower_bound);
  CHECK(rows[2].seeds == 2);
  // Its final loss is seed 2's (6.0 at 10000 tokens): the interrupted run's last loss is not final.
  CHECK(*rows[2].final_val_loss == Approx(6.0));
}
