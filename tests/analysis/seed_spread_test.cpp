// `mxablate plan RECIPE --seeds`: the spread of an earlier sweep's paired per-seed costs, pooled
// over its arms, and the seeds a difference needs (analysis/seed_spread.h); and its bad input, one
// line naming the option, exit 2.
#include <cmath>
#include <filesystem>

#include "catch.h"
#include "mxablate/analysis/seed_spread.h"
#include "mxablate/contract/run_config.h"
#include "mxablate/results/ingest.h"
#include "mxablate/results/store.h"
#include "process_util.h"

using namespace mxablate;
using nlohmann::json;

namespace {

// Evaluations every 1000 tokens to 10000: loss = start - 0.5 per 1000 tokens, so the fixed
// target 6.0 is reached at 2000 · (start - 6) tokens.
std::vector<json> linear_evals(double start) {
  std::vector<json> events;
  for (int k = 1; k <= 10; ++k)
    events.push_back({{"seq", k}, {"kind", "eval"}, {"step", 10 * k}, {"tokens", 1000 * k},
                      {"val_loss", start - 0.5 * k}, {"time", 0.0}});
  return events;
}

double start_for(double tokens) { return 6.0 + tokens / 2000; }

// fp8 reaches the target at 8000, 8200, 7800, 8400 tokens (seeds 1-4); FDW costs +5, +7, +3, +9 %
// (SD sqrt(20/3) = 2.582), FD +1, +4, -2, +2 % (SD 2.5) against the fp8 run of the same seed. With
// `seeds` = 1 every arm has one seed: nothing to take a spread from.
void build_database(const std::string& path, int seeds) {
  results::ResultsStore store(path);
  results::SweepRecord sweep{"spread", "spread.yaml", "name: spread", "runs", json::object(),
                             std::nullopt};
  sweep.target = {{"val_loss", 6.0}};
  const int64_t sweep_id = store.register_sweep(sweep);
  const char* arms[] = {"fp8", "FDW", "FD"};
  const double base[] = {8000, 8200, 7800, 8400};
  const double costs[3][4] = {{0, 0, 0, 0}, {5, 7, 3, 9}, {1, 4, -2, 2}};
  std::vector<results::PlannedRun> plan;
  for (int a = 0; a < 3; ++a) {
    for (int seed = 1; seed <= seeds; ++seed) {
      contract::RunConfig c;
      c.arm = arms[a];
      c.train.seed = static_cast<uint64_t>(seed);
      c.train.max_tokens = 10000;
      const auto p = *contract::parse_gemm_precision(a == 0 ? "fp8" : "mxfp4");
      c.precision = {p, p, a == 1 ? p : *contract::parse_gemm_precision("fp8")};
      const std::string id = std::string(arms[a]) + "-" + std::to_string(seed);
      results::PlannedRun run;  // by member: the store's run record grows
      run.run_id = id;
      run.arm = arms[a];
      run.arm_index = a;
      run.config_json = contract::to_json(c).dump();
      run.run_dir = "runs/" + id;
      run.max_tokens = 10000;
      run.axes = {{"seed", std::to_string(seed)}};
      plan.push_back(run);
    }
  }
  store.register_plan(sweep_id, plan);
  for (int a = 0; a < 3; ++a) {
    for (int seed = 1; seed <= seeds; ++seed) {
      const std::string id = std::string(arms[a]) + "-" + std::to_string(seed);
      const double tokens = base[seed - 1] * (1 + costs[a][seed - 1] / 100);
      results::ingest_events(store.db(), id, linear_evals(start_for(tokens)), 1);
      store.set_status(id, "budget_exhausted");
    }
  }
}

const std::string kBin = MXABLATE_BIN;
const std::string kRecipe = std::string(RECIPES_DIR) + "/smoke.yaml";

test::CommandResult seeds(const std::string& args) {
  return test::run_command(kBin + " plan " + kRecipe + " --seeds " + args + " 2>&1");
}

// The one line of a refusal, and its exit code.
void check_refused(const test::CommandResult& r, const std::string& line) {
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK(r.output == "mxablate: " + line + "\n");
}

}  // namespace

TEST_CASE("the spread of the paired per-seed costs, per arm and pooled, and the seeds it needs") {
  test::TempDir dir("mxablate_seed_spread");
  const std::string path = dir / "spread.db";
  build_database(path, 4);
  results::Database db(path, results::Database::Mode::kReadOnly);
  const auto blocks = analysis::analyze_by_model(analysis::load_sweep(db, ""), "");
  const analysis::SeedsPlan p = analysis::plan_seeds(blocks, 2.0);
  REQUIRE(p.rows.size() == 2);
  CHECK(p.rows[0].row == "FDW");
  CHECK(p.rows[0].pairs == 4);
  CHECK(*p.rows[0].sd_pct == Approx(std::sqrt(20.0 / 3)));
  CHECK(*p.rows[1].sd_pct == Approx(2.5));
  CHECK(p.pooled_rows == 2);
  CHECK(p.pooled_df == 6);
  // Pooled: sqrt((20 + 18.75) / 6) = 2.5413. For 2 %: 7.849 · (2.5413 / 2)^2 + 1.921 = 14.59.
  CHECK(*p.pooled_sd_pct == Approx(std::sqrt(38.75 / 6)));
  CHECK(*p.pairs_needed == 15);
  // For 5 % the formula says 4, but the exact test needs 6 pairs to reach p < 0.05 at all; with
  // the difference 2 SDs away, all six of one sign happens with probability 0.86 >= 0.8.
  CHECK(*analysis::plan_seeds(blocks, 5.0).pairs_needed == 6);
}

TEST_CASE("`plan --seeds` prints the pooled spread and the seeds a difference needs") {
  test::TempDir dir("mxablate_seed_spread_cli");
  const std::string path = dir / "spread.db";
  build_database(path, 4);
  const auto r = seeds("--db " + path + " --difference 2");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("seeds for a difference of 2 % in extra tokens, from sweep 'spread' in " +
                      path + ":\n") == 0);
  // Per row: FDW 7.849 · (2.582 / 2)^2 + 1.921 = 15.002, so 16; FD 7.849 · 1.25^2 + 1.921 = 14.2.
  CHECK(r.output.find("  row  pairs  censored  SD of cost  seeds needed\n"
                      "  FDW      4         0  2.58 %                16\n"
                      "  FD       4         0  2.50 %                15\n") != std::string::npos);
  CHECK(r.output.find("pooled over 2 rows (6 degrees of freedom): SD 2.54 % of the baseline's "
                      "tokens per seed; a difference of 2 % needs 15 seeds for the exact "
                      "sign-flip test at alpha 0.05 with 80 % power\n") != std::string::npos);
  CHECK(r.output.find("the exact test can reach p < 0.05 only from 6 seeds (its smallest p is "
                      "2/2^n: 0.0625 with 5)") != std::string::npos);
  // The default difference is 5 %; a sweep named explicitly.
  const auto d = seeds("--db " + path + " --sweep spread");
  CHECK(d.exit_code == 0);
  CHECK(d.output.find("a difference of 5 % needs 6 seeds") != std::string::npos);
}

TEST_CASE("`plan --seeds` refuses what it cannot plan with, in one line naming the option") {
  test::TempDir dir("mxablate_seed_spread_bad");
  const std::string empty = dir / "empty.db";
  { results::ResultsStore store(empty); }
  check_refused(seeds("--db " + empty),
                "--seeds: " + empty + ": holds no sweep yet (the spread of an earlier sweep's "
                "paired per-seed costs is what --seeds plans with)");
  const std::string single = dir / "single.db";
  build_database(single, 1);
  check_refused(seeds("--db " + single),
                "--seeds: sweep 'spread' in " + single + " has no paired per-seed costs: no arm "
                "has two seeds paired with baseline runs of the same seed that reached the target");
  const std::string good = dir / "good.db";
  build_database(good, 4);
  check_refused(seeds("--db " + good + " --sweep other"),
                "--seeds: " + good + ": no sweep named 'other' (the spread of an earlier sweep's "
                "paired per-seed costs is what --seeds plans with)");
  for (const std::string bad : {"0", "=-5", "abc", "5%", "nan", "inf", "''"}) {
    INFO(bad);
    // "=-5": the value glued to the option, or the parser takes it for an option of its own.
    const std::string shown = bad == "''" ? "" : bad == "=-5" ? "-5" : bad;
    check_refused(seeds("--db " + good + " --difference" + (bad[0] == '=' ? "" : " ") + bad),
                  "--difference: '" + shown + "' is not a positive number (the difference in extra "
                  "tokens to detect, in percent: 5 for 5 %)");
  }
  // The options that only mean something with --seeds.
  const auto alone = test::run_command(kBin + " plan " + kRecipe + " --difference 5 2>&1");
  CHECK(alone.exit_code == 2);
  CHECK(alone.output.find("--difference requires --seeds") != std::string::npos);
}
