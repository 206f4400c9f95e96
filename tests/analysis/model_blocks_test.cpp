// A sweep over several models, from a hand-made results store: one block per model ordered by
// the parameter count the trainer recorded (not by name, not by plan order), each with its own
// target and its own baseline; the figure of extra tokens against parameters takes the table's
// medians and intervals; and the `mxablate table` command prints the blocks.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "catch.h"
#include "mxablate/analysis/model_blocks.h"
#include "mxablate/contract/run_config.h"
#include "mxablate/results/ingest.h"
#include "mxablate/results/sqlite_db.h"
#include "mxablate/results/store.h"
#include "process_util.h"

using namespace mxablate;
using nlohmann::json;

namespace {

struct Model {
  const char* name;
  int64_t params;
  double scale;     // budget and evaluation interval, × 10000 and × 1000 tokens
  double start;     // fp8 seed 1's first loss
  double fdw_lag;   // FDW's loss above fp8's, at every evaluation
};

// In plan order: neither by name (llama-125m < llama-20m < llama-5m) nor by size.
constexpr Model kModels[] = {{"llama-125m", 123587328, 4, 8.0, 0.4},
                             {"llama-20m", 22020096, 2, 9.0, 0.2},
                             {"llama-5m", 5242880, 1, 10.0, 0.1}};

// Evaluations every 1000 × scale tokens to 10000 × scale: loss = start - 0.5 per interval.
std::vector<json> evals(double start, double scale, int64_t& seq) {
  std::vector<json> events;
  for (int k = 1; k <= 10; ++k)
    events.push_back({{"seq", ++seq}, {"kind", "eval"}, {"step", 10 * k},
                      {"tokens", static_cast<int64_t>(1000 * k * scale)},
                      {"val_loss", start - 0.5 * k}, {"time", 0.0}});
  return events;
}

json run_start(int64_t& seq, int64_t params) {
  return {{"seq", ++seq}, {"kind", "run_start"}, {"step", 0}, {"tokens", 0}, {"attempt", 1},
          {"device", "cpu"}, {"params", params}, {"resumed", false}, {"time", 0.0}};
}

// fp8 and FDW × three models × seeds 1 and 2, every run at its full budget. The runs of
// llama-20m seed 2 (FDW) recorded another parameter count (a database from elsewhere).
void build_database(const std::string& path, bool with_params = true) {
  results::ResultsStore store(path);
  results::SweepRecord sweep{"scales", "scales.yaml", "name: scales", "runs", json::object(),
                             std::nullopt};
  sweep.target = {{"from_arm", "fp8"}, {"at_fraction", 0.8}};
  const int64_t sweep_id = store.register_sweep(sweep);
  std::vector<results::PlannedRun> plan;
  const char* arms[] = {"fp8", "FDW"};
  for (int a = 0; a < 2; ++a) {
    for (const Model& m : kModels) {
      for (int seed = 1; seed <= 2; ++seed) {
        contract::RunConfig c;
        c.arm = arms[a];
        c.model = m.name;
        c.train.seed = static_cast<uint64_t>(seed);
        c.train.max_tokens = 10000 * m.scale;
        const contract::GemmPrecision p = a == 0 ? contract::GemmPrecision::kFP8
                                                 : contract::GemmPrecision::kMXFP4;
        c.precision = {p, p, p};
        const std::string id = fmt::format("{}-{}-{}", arms[a], m.name, seed);
        plan.push_back({id, arms[a], a, contract::to_json(c).dump(), "runs/" + id,
                        10000 * m.scale,
                        {{"model", json(m.name).dump()},
                         {"train.max_tokens", json(10000 * m.scale).dump()},
                         {"seed", std::to_string(seed)}}});
      }
    }
  }
  store.register_plan(sweep_id, plan);
  for (int a = 0; a < 2; ++a) {
    for (const Model& m : kModels) {
      for (int seed = 1; seed <= 2; ++seed) {
        int64_t seq = 0;
        std::vector<json> events;
        const bool odd = a == 1 && seed == 2 && std::string(m.name) == "llama-20m";
        if (with_params) events.push_back(run_start(seq, odd ? m.params + 1 : m.params));
        const double start = m.start + 0.2 * (seed - 1) + (a == 1 ? m.fdw_lag : 0.0);
        for (json& e : evals(start, m.scale, seq)) events.push_back(e);
        const std::string id = fmt::format("{}-{}-{}", arms[a], m.name, seed);
        results::ingest_events(store.db(), id, events, 1);
        store.set_status(id, "budget_exhausted");
      }
    }
  }
}

// fp8 at 80 %: start - 4.0 and start + 0.2 - 4.0, median start - 3.9, reached at 7.8 and 8.2
// intervals. FDW reaches it lag / 0.5 intervals later: against the fp8 run of its own seed,
// the cost is the median of the two seeds' (7.8 + 2 lag) / 7.8 and (8.2 + 2 lag) / 8.2.
double expected_cost(double lag) {
  return 100.0 * (((7.8 + 2 * lag) / 7.8 + (8.2 + 2 * lag) / 8.2) / 2 - 1);
}

}  // namespace

TEST_CASE("a sweep over models is one block per model, by parameter count, each with its own "
          "target and baseline") {
  test::TempDir dir("mxablate_model_blocks");
  const std::string path = dir / "scales.db";
  build_database(path);
  results::Database db(path, results::Database::Mode::kReadOnly);
  const analysis::SweepData sweep = analysis::load_sweep(db, "scales");
  REQUIRE(sweep.runs.size() == 12);

  const std::vector<analysis::BlockTable> blocks = analysis::analyze_by_model(sweep, "");
  REQUIRE(blocks.size() == 3);
  const Model* by_size[] = {&kModels[2], &kModels[1], &kModels[0]};
  for (size_t i = 0; i < 3; ++i) {
    const Model& m = *by_size[i];
    const analysis::BlockTable& b = blocks[i];
    INFO(m.name);
    CHECK(b.block.model == m.name);
    REQUIRE(b.block.params);
    CHECK(*b.block.params == m.params);
    CHECK(b.block.sweep.groups == std::vector<std::string>{"fp8", "FDW"});
    // The model's own target: its fp8 runs at 80 % of their budget.
    REQUIRE(b.target.val_loss);
    CHECK(*b.target.val_loss == Approx(m.start - 3.9));
    CHECK(b.target.description.find(fmt::format("of its {:.3g}-token budget", 10000 * m.scale)) !=
          std::string::npos);
    REQUIRE(b.table.size() == 2);
    CHECK(b.table[0].is_baseline);
    CHECK(b.table[0].model == m.name);
    CHECK(b.table[1].arm == "FDW");
    CHECK(b.table[1].cost.paired);
    REQUIRE(b.table[1].cost.median_pct);
    CHECK(*b.table[1].cost.median_pct == Approx(expected_cost(m.fdw_lag)));
  }
  CHECK(blocks[0].block.heading == "model llama-5m (5.24 M parameters)");
  CHECK(blocks[1].block.heading == "model llama-20m (22 M parameters)");
  CHECK(blocks[2].block.heading == "model llama-125m (124 M parameters)");
  // Three runs recorded 22020096, one 22020097: the majority is every run's count, and said.
  REQUIRE(blocks[1].block.notes.size() == 1);
  CHECK(blocks[1].block.notes[0] ==
        "Runs of model llama-20m recorded different parameter counts: 22020096 (3 runs), "
        "22020097 (1 run); 22020096 is used for all of them");
  CHECK(blocks[0].block.notes.empty());

  // One stored target cannot be three models' targets.
  CHECK_FALSE(analysis::target_to_store(sweep).has_value());

  // The table: a heading per model, smallest first, rows named by arm only.
  const std::string md = analysis::render_blocks(sweep.name, blocks,
                                                 analysis::TableFormat::kMarkdown,
                                                 analysis::TableMetric::kLoss);
  const size_t small = md.find("## model llama-5m (5.24 M parameters)\n");
  const size_t mid = md.find("## model llama-20m (22 M parameters)\n");
  const size_t large = md.find("## model llama-125m (124 M parameters)\n");
  REQUIRE(small != std::string::npos);
  REQUIRE(mid != std::string::npos);
  REQUIRE(large != std::string::npos);
  CHECK(small < mid);
  CHECK(mid < large);
  CHECK(md.find("target val loss 4.1000 (perplexity 60.34)", large) != std::string::npos);
  CHECK(md.find(fmt::format("| FDW | mxfp4 | mxfp4 | mxfp4 | - | {:+.1f} %",
                            expected_cost(0.1)),
                small) < mid);
  const std::string csv = analysis::render_blocks(sweep.name, blocks, analysis::TableFormat::kCsv,
                                                  analysis::TableMetric::kLoss);
  CHECK(csv.rfind("arm,", 0) == 0);
  CHECK(csv.find("\narm,") == std::string::npos);  // one header
  CHECK(csv.find(",llama-20m,22020096\n") != std::string::npos);
  const std::string tex = analysis::render_blocks(sweep.name, blocks, analysis::TableFormat::kLatex,
                                                  analysis::TableMetric::kLoss);
  CHECK(tex.find("\\caption{Sweep scales, model llama-125m (124 M parameters): target val loss "
                 "4.1000") != std::string::npos);

  // Another baseline, per model; an arm no model has is an error, as is one a model lacks.
  const auto against_fdw = analysis::analyze_by_model(sweep, "FDW");
  CHECK(against_fdw[0].table[1].is_baseline);
  CHECK_THROWS_WITH(analysis::analyze_by_model(sweep, "bf16"),
                    "--baseline: sweep 'scales' has no arm 'bf16'");
  analysis::SweepData partial = sweep;
  for (analysis::RunRecord& r : partial.runs)
    if (r.model == "llama-5m" && r.arm == "FDW") r.arm = "FDW-small";
  CHECK_THROWS_WITH(analysis::analyze_by_model(partial, "FDW"),
                    "--baseline: sweep 'scales' has no arm 'FDW' at model llama-5m");
}

TEST_CASE("the figure of extra tokens against parameters takes each block's medians and intervals") {
  test::TempDir dir("mxablate_scale_figure");
  const std::string path = dir / "scales.db";
  build_database(path);
  results::Database db(path, results::Database::Mode::kReadOnly);
  const analysis::SweepData sweep = analysis::load_sweep(db, "scales");
  const auto blocks = analysis::analyze_by_model(sweep, "");
  const analysis::ScaleFigure f = analysis::scale_figure(blocks);
  CHECK(f.omitted.empty());
  CHECK(f.skipped.empty());
  REQUIRE(f.series.size() == 1);  // FDW; the baseline is 0 % by definition
  CHECK(f.series[0].arm == "FDW");
  REQUIRE(f.series[0].points.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    const analysis::ScalePoint& p = f.series[0].points[i];
    const analysis::ArmSummary& row = blocks[i].table[1];
    CHECK(p.params == static_cast<double>(*blocks[i].block.params));
    CHECK(p.median_pct == *row.cost.median_pct);
    REQUIRE(row.cost.interval.has_value());
    CHECK(p.low_pct == row.cost.interval->low);
    CHECK(p.high_pct == row.cost.interval->high);
    CHECK(p.low_pct <= p.median_pct);
    CHECK(p.median_pct <= p.high_pct);
    CHECK_FALSE(p.lower_bound);
  }
  CHECK(f.series[0].points[0].params < f.series[0].points[1].params);

  // The report's data: one table per model, no single target line, the figure.
  const analysis::ReportData d = analysis::report_data(sweep, blocks);
  REQUIRE(d.blocks.size() == 3);
  CHECK(d.blocks[0].heading == "model llama-5m (5.24 M parameters)");
  CHECK(d.blocks[1].caption.find("recorded different parameter counts") != std::string::npos);
  CHECK_FALSE(d.target.has_value());
  CHECK(d.scale.series.size() == 1);
  // Curves are named by arm and model, smallest model first.
  CHECK(d.arms == std::vector<std::string>{"fp8 · llama-5m", "FDW · llama-5m", "fp8 · llama-20m",
                                           "FDW · llama-20m", "fp8 · llama-125m",
                                           "FDW · llama-125m"});
  REQUIRE(d.runs.size() == 12);
  CHECK(d.runs[0].arm == "fp8 · llama-5m");

  // A point without a figure (no cost: NaN from a corrupt database, or never computed) is left
  // out and named; a model without a count is named too.
  auto broken = blocks;
  broken[1].table[1].cost.median_pct = std::nan("");
  broken[2].block.params.reset();
  const analysis::ScaleFigure g = analysis::scale_figure(broken);
  CHECK(g.omitted.empty());
  REQUIRE(g.series.size() == 1);
  REQUIRE(g.series[0].points.size() == 1);
  CHECK(g.series[0].points[0].params == 5242880);
  CHECK(g.skipped == std::vector<std::string>{
                         "model llama-125m: no parameter count recorded yet (the trainer records "
                         "it when a run starts)",
                         "FDW at model llama-20m: no extra-token figure (no run of it or of the "
                         "baseline at that model reached the target)"});
  broken[1].block.params.reset();
  CHECK(analysis::scale_figure(broken).omitted ==
        "The figure of extra tokens against parameters needs the parameter counts of at least "
        "two models; 1 of the sweep's 3 models has one yet (the trainer records it when a run "
        "starts).");
}

TEST_CASE("without parameter counts the blocks keep the plan's order, and one model is one block") {
  test::TempDir dir("mxablate_model_blocks_nocount");
  const std::string path = dir / "scales.db";
  build_database(path, false);
  results::Database db(path, results::Database::Mode::kReadOnly);
  const analysis::SweepData sweep = analysis::load_sweep(db, "scales");
  const auto blocks = analysis::analyze_by_model(sweep, "");
  REQUIRE(blocks.size() == 3);
  CHECK(blocks[0].block.heading == "model llama-125m (parameter count not recorded yet)");
  CHECK(blocks[1].block.model == "llama-20m");
  CHECK(blocks[2].block.model == "llama-5m");
  CHECK(analysis::scale_figure(blocks).omitted.find("0 of the sweep's 3 models have one") !=
        std::string::npos);

  // A sweep of one model: one block, the sweep as it is, and the figure omitted with the reason.
  analysis::SweepData one = sweep;
  one.runs.erase(std::remove_if(one.runs.begin(), one.runs.end(),
                                [](const analysis::RunRecord& r) { return r.model != "llama-20m"; }),
                 one.runs.end());
  one.groups.clear();
  for (const analysis::RunRecord& r : one.runs)
    if (std::find(one.groups.begin(), one.groups.end(), r.group) == one.groups.end())
      one.groups.push_back(r.group);
  const auto single = analysis::analyze_by_model(one, "");
  REQUIRE(single.size() == 1);
  CHECK(single[0].block.heading.empty());
  // Rows keep their full names; a model axis by the model's label (contract::model_label).
  CHECK(single[0].block.sweep.groups ==
        std::vector<std::string>{"fp8 [model=llama-20m train.max_tokens=20000.0]",
                                 "FDW [model=llama-20m train.max_tokens=20000.0]"});
  CHECK(analysis::scale_figure(single).omitted ==
        "The figure of extra tokens against parameters needs a sweep over at least two models; "
        "this one has one (llama-20m).");
}

TEST_CASE("`mxablate table` prints one block per model, smallest model first") {
  test::TempDir dir("mxablate_model_blocks_cli");
  const std::string path = dir / "scales.db";
  build_database(path);
  const auto out = test::run_command(std::string(MXABLATE_BIN) + " table --db " + path + " 2>&1");
  INFO(out.output);
  REQUIRE(out.exit_code == 0);
  const size_t small = out.output.find("## model llama-5m");
  const size_t mid = out.output.find("## model llama-20m");
  const size_t large = out.output.find("## model llama-125m");
  REQUIRE(small != std::string::npos);
  CHECK(small < mid);
  REQUIRE(mid != std::string::npos);
  CHECK(mid < large);
  CHECK(out.output.rfind("Sweep scales: 3 models, one table each", 0) == 0);
}

// Model names come from stored configs, which anyone may have written: in headings and
// captions they go through the format's escaping like every other name.
TEST_CASE("a hostile model name stays text in every table format") {
  test::TempDir dir("mxablate_model_blocks_hostile");
  const std::string path = dir / "scales.db";
  build_database(path);
  results::Database db(path, results::Database::Mode::kReadOnly);
  analysis::SweepData sweep = analysis::load_sweep(db, "scales");
  const std::string hostile = "m|<b>x</b>\n## $\\input{/etc/passwd}";
  for (analysis::RunRecord& r : sweep.runs)
    if (r.model == "llama-5m") r.model = hostile;
  const auto blocks = analysis::analyze_by_model(sweep, "");
  REQUIRE(blocks.size() == 3);
  CHECK(blocks[0].block.model == hostile);
  const std::string md = analysis::render_blocks(sweep.name, blocks,
                                                 analysis::TableFormat::kMarkdown,
                                                 analysis::TableMetric::kLoss);
  CHECK(md.find("## model m\\|\\<b\\>x\\</b\\>\\\\x0a## $\\\\input{/etc/passwd} (5.24 M "
                "parameters)\n") != std::string::npos);
  CHECK(md.find("<b>") == std::string::npos);
  CHECK(md.find("\n## $") == std::string::npos);
  const std::string tex = analysis::render_blocks(sweep.name, blocks, analysis::TableFormat::kLatex,
                                                  analysis::TableMetric::kLoss);
  CHECK(tex.find("\\input") == std::string::npos);
  CHECK(tex.find("\\textbackslash{}input\\{/etc/passwd\\}") != std::string::npos);
  const std::string csv = analysis::render_blocks(sweep.name, blocks, analysis::TableFormat::kCsv,
                                                  analysis::TableMetric::kLoss);
  CHECK(csv.find(",m|<b>x</b>\\x0a## $\\input{/etc/passwd},5242880\n") != std::string::npos);
}
