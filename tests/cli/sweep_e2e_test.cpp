// End to end on the CPU: a three-arm sweep with the real trainer on the default corpus, through
// the orchestrator into SQLite, then `mxablate table` and `mxablate report` read it back.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "catch.h"
#include "process_util.h"

using mxablate::test::run_command;
using mxablate::test::TempDir;

namespace {

const std::string kBin = MXABLATE_BIN_DIR;
const std::string kCorpus = std::string(MXABLATE_SOURCE_DIR) + "/data/default";

std::vector<std::vector<std::string>> parse_csv(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::string cell;
    bool quoted = false;
    for (char c : line) {
      if (c == '"') {
        quoted = !quoted;
      } else if (c == ',' && !quoted) {
        cells.push_back(cell);
        cell.clear();
      } else {
        cell += c;
      }
    }
    cells.push_back(cell);
    rows.push_back(cells);
  }
  return rows;
}

}  // namespace

TEST_CASE("a small real sweep runs, is stored, and comes back as a table and a report") {
  if (!std::filesystem::exists(kCorpus + "/manifest.json")) {
    MXABLATE_SKIP("the default corpus is not built (" + kCorpus + "; scripts/setup.sh builds it)");
  }
  TempDir dir("mxablate_sweep_e2e");
  const std::string recipe = dir / "mini.yaml";
  std::ofstream(recipe) << R"(name: mini
base:
  model: smoke
  data: {dataset: default, seq_len: 64}
  train: {global_batch_tokens: 512, max_tokens: 8192, lr: 3e-3, warmup_tokens: 1024}
  eval: {every_tokens: 2048, tokens: 2048}
  precision: {fprop: fp8, dgrad: fp8, wgrad: fp8}
  checkpoint: {every_steps: 8}
  threads: 1
target: {from_arm: fp8, at_fraction: 0.8}
arms:
  fp8: {}
  FDW: {precision: {fprop: mxfp4, dgrad: mxfp4, wgrad: mxfp4}}
  FDW+H16: {extends: FDW, quant: {hadamard: {mode: deterministic, size: 16, gemms: [wgrad]}}}
grid:
  seed: [1]
)";
  const std::string db = dir / "results.db";
  const std::string env = "MXABLATE_DEFAULT_DATASET=" + kCorpus + " ";
  const auto run = run_command(env + kBin + "/mxablate run " + recipe + " --cpu 2 --db " + db +
                               " --runs-dir " + dir / "runs" + " --progress none");
  INFO(run.output);
  REQUIRE(run.exit_code == 0);

  const auto table = run_command(kBin + "/mxablate table --db " + db + " --format csv");
  INFO(table.output);
  REQUIRE(table.exit_code == 0);
  const auto rows = parse_csv(table.output);
  REQUIRE(rows.size() == 4);  // header + three arms, in recipe order
  CHECK(rows[0][0] == "arm");
  CHECK(rows[1][0] == "fp8");
  CHECK(rows[1][5] == "true");  // the baseline
  CHECK(rows[2][0] == "FDW");
  CHECK(rows[3][0] == "FDW+H16");
  CHECK(rows[3][4] == "H16 deterministic (wgrad)");
  const auto column = [&](const std::string& name) {
    const auto at = std::find(rows[0].begin(), rows[0].end(), name);
    REQUIRE(at != rows[0].end());
    return static_cast<size_t>(at - rows[0].begin());
  };
  for (size_t i = 1; i < rows.size(); ++i) {
    const double final_loss = std::stod(rows[i][column("final_val_loss")]);
    CHECK(final_loss < 8.0);  // started near ln(4096) = 8.3 and fell
    CHECK(final_loss > 3.0);
    CHECK(rows[i][column("seeds")] == "1");
    // One seed: no interval of any kind.
    CHECK(rows[i][column("interval_kind")].empty());
  }

  const auto md = run_command(kBin + "/mxablate table --db " + db);
  CHECK(md.output.find("target val loss") != std::string::npos);

  const auto report = run_command(kBin + "/mxablate report --db " + db + " --out " + dir / "report");
  INFO(report.output);
  REQUIRE(report.exit_code == 0);
  CHECK(std::filesystem::exists(dir / "report/index.html"));
  // The GPU machine has no gnuplot: the page is written all the same, and the output says why
  // it holds no plots.
  if (run_command("command -v gnuplot").exit_code == 0) {
    CHECK(report.output.find(" plots)") != std::string::npos);
  } else {
    CHECK(report.output.find("(0 plots, skipped: gnuplot not found)") != std::string::npos);
  }
}
