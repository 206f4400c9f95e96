// `mxablate report`, `table` and `status` as a user runs them, on a database whose names are
// hostile: a report without gnuplot says so first on stderr and in the page; with gnuplot the
// names run nothing; no output format lets a name out of its cell; no escape byte reaches the
// terminal.
#include <filesystem>
#include <fstream>
#include <sstream>

#include "catch.h"
#include "mxablate/contract/run_config.h"
#include "mxablate/results/ingest.h"
#include "mxablate/results/store.h"
#include "process_util.h"

using namespace mxablate;
using nlohmann::json;
using test::run_command;
using test::TempDir;

namespace {

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Two arms of two runs each; `mark` is where a name's shell command would leave a file.
struct HostileDb {
  std::string sweep = "sw\x1b[2Jeep";
  std::string base = "fp8";
  std::string evil;
  std::string reason;
};

HostileDb build_database(const std::string& path, const std::string& mark) {
  HostileDb h;
  h.evil = "e|vil\n!touch " + mark + "1\n`touch " + mark + "2` \\input{/etc/passwd} \x1b[31m=1+2";
  h.reason = "boom\n!touch " + mark + "3";
  results::ResultsStore store(path);
  results::SweepRecord sweep{h.sweep, "r.yaml", "name: x", "runs", json::object(), 5.0};
  const int64_t sweep_id = store.register_sweep(sweep);
  std::vector<results::PlannedRun> plan;
  const std::string arms[] = {h.base, h.evil};
  for (int a = 0; a < 2; ++a) {
    for (int seed = 1; seed <= 2; ++seed) {
      contract::RunConfig c;
      c.arm = arms[a];
      c.train.seed = static_cast<uint64_t>(seed);
      c.train.max_tokens = 10000;
      c.precision = {contract::GemmPrecision::kFP8, contract::GemmPrecision::kFP8,
                     contract::GemmPrecision::kFP8};
      const std::string id = "run" + std::to_string(a) + "-" + std::to_string(seed);
      plan.push_back({id, arms[a], a, contract::to_json(c).dump(), "runs/" + id, 10000,
                      {{"seed", std::to_string(seed)}}});
    }
  }
  store.register_plan(sweep_id, plan);
  for (int a = 0; a < 2; ++a) {
    for (int seed = 1; seed <= 2; ++seed) {
      const std::string id = "run" + std::to_string(a) + "-" + std::to_string(seed);
      std::vector<json> events;
      int64_t seq = 0;
      for (int k = 1; k <= 10; ++k)
        events.push_back({{"seq", ++seq}, {"kind", "eval"}, {"step", 10 * k}, {"tokens", 1000 * k},
                          {"val_loss", 10.0 + a - 0.5 * k}, {"time", 0.0}});
      if (a == 1 && seed == 1)
        events.push_back({{"seq", ++seq}, {"kind", "divergence"}, {"step", 100}, {"tokens", 10000},
                          {"reason", h.reason}, {"value", nullptr}, {"severity", "fatal"},
                          {"time", 0.0}});
      results::ingest_events(store.db(), id, events, 1);
      store.set_status(id, a == 1 && seed == 1 ? "diverged" : "budget_exhausted",
                       a == 1 ? std::optional<std::string>("note \x1b]0;pwned\x07 \xff end")
                              : std::nullopt);
    }
  }
  return h;
}

// Runs `args` through the mxablate binary with stdout and stderr kept apart.
struct Cli {
  int exit_code;
  std::string out, err;
};
Cli run_cli(const TempDir& dir, const std::string& args, const std::string& env = "") {
  const std::string out = dir / "stdout.txt", err = dir / "stderr.txt";
  const auto r = run_command("{ " + env + " " MXABLATE_BIN " " + args + " >" + out + " 2>" + err +
                             "; }");
  return {r.exit_code, read(out), read(err)};
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

}  // namespace

TEST_CASE("mxablate report without gnuplot says so first on stderr and in the page") {
  TempDir dir("mxablate_report_cli_nognuplot");
  const std::string db = dir / "m.db";
  build_database(db, dir / "MARK");
  const std::string missing = dir / "no-gnuplot-here";
  const Cli r = run_cli(dir, "report --db " + db + " --out " + dir / "report" + " --gnuplot " +
                                  missing);
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(first_line(r.err) ==
        "mxablate report: plots skipped: gnuplot was not found (no executable program at " +
            missing +
            "). The rest of the report is written. To get the plots, install gnuplot "
            "(Debian/Ubuntu: apt-get install gnuplot-nox) and run `mxablate report` again, or "
            "copy the results database to a machine that has gnuplot and run `mxablate report "
            "--db <copy>` there.");
  CHECK(r.out == "wrote " + dir / "report/index.html" + " (0 plots, skipped: gnuplot not found)\n");
  const std::string html = read(dir / "report/index.html");
  CHECK(html.find("id=\"plots-skipped\">plots skipped: gnuplot was not found") != std::string::npos);
  CHECK(html.find("<h2>Extra tokens to target, per arm</h2>") != std::string::npos);

  // The same through the environment, for a machine where every report should say so.
  const Cli by_env = run_cli(dir, "report --db " + db + " --out " + dir / "report2",
                              "MXABLATE_GNUPLOT=" + missing);
  CHECK(by_env.exit_code == 0);
  CHECK(first_line(by_env.err).find("(no executable program at " + missing + ")") !=
        std::string::npos);
}

TEST_CASE("hostile names in a database: report, tables and status print them as text") {
  TempDir dir("mxablate_report_cli_hostile");
  const std::string db = dir / "m.db";
  const std::string mark = dir / "MARK";
  const HostileDb h = build_database(db, mark);

  const Cli md = run_cli(dir, "table --db " + db);
  REQUIRE(md.exit_code == 0);
  CHECK(md.out.find("\n| e\\|vil\\\\x0a!touch " + mark + "1\\\\x0a`touch " + mark +
                    "2` \\\\input{/etc/passwd} \\\\x1b\\[31m=1+2 | fp8 |") != std::string::npos);
  const Cli tex = run_cli(dir, "table --format latex --db " + db);
  REQUIRE(tex.exit_code == 0);
  CHECK(tex.out.find("\ne\\textbar{}vil\\textbackslash{}x0a!touch ") != std::string::npos);
  CHECK(tex.out.find("\\input{") == std::string::npos);
  CHECK(tex.out.find("\\caption{Sweep sw\\textbackslash{}x1b[2Jeep: ") != std::string::npos);
  const Cli csv = run_cli(dir, "table --format csv --db " + db);
  REQUIRE(csv.exit_code == 0);
  CHECK(csv.out.find("\ne|vil\\x0a!touch " + mark + "1\\x0a`touch " + mark +
                     "2` \\input{/etc/passwd} \\x1b[31m=1+2,fp8,") != std::string::npos);
  CHECK(csv.out.find(",boom\\x0a!touch " + mark + "3,") != std::string::npos);
  const Cli status = run_cli(dir, "status --db " + db);
  REQUIRE(status.exit_code == 0);
  CHECK(status.out.rfind("sweep sw\\x1b[2Jeep: 4 runs", 0) == 0);
  CHECK(status.out.find("note \\x1b]0;pwned\\x07 \\xff end") != std::string::npos);
  for (const Cli* c : {&md, &tex, &csv, &status}) {
    CHECK(c->out.find('\x1b') == std::string::npos);
    CHECK(c->out.find('\x07') == std::string::npos);
    CHECK(c->out.find('\xff') == std::string::npos);
  }
  // An error that quotes a name from the command line (or the data) reaches stderr escaped.
  const Cli bad = run_cli(dir, "table --db " + db + " --baseline \"$(printf 'x\\033[2Jy')\"");
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("has no arm 'x\\x1b[2Jy'") != std::string::npos);
  CHECK(bad.err.find('\x1b') == std::string::npos);

  if (run_command("command -v gnuplot").exit_code != 0)
    MXABLATE_SKIP("gnuplot is not installed (scripts/setup.sh installs it): no plots to check");
  const Cli report = run_cli(dir, "report --db " + db + " --out " + dir / "report");
  INFO(report.err);
  CHECK(report.exit_code == 0);
  CHECK(report.err.empty());
  CHECK(report.out == "wrote " + dir / "report/index.html" + " (2 plots)\n");
  for (int i = 1; i <= 3; ++i) CHECK_FALSE(std::filesystem::exists(mark + std::to_string(i)));
}

TEST_CASE("status shows axis values that are not JSON or not UTF-8 as text") {
  TempDir dir("mxablate_status_bad_axes");
  const std::string db = dir / "m.db";
  build_database(db, dir / "MARK");
  {
    results::ResultsStore store(db);
    // Written as another program could: SQLite's json() would refuse the first, and the
    // second is a JSON string whose bytes are not UTF-8.
    store.db().exec("UPDATE run_axes SET value = '{not json' WHERE run_id = 'run0-1'");
    store.db().exec("UPDATE run_axes SET value = '\"' || CAST(X'FF41' AS TEXT) || '\"' "
                    "WHERE run_id = 'run0-2'");
  }
  const Cli status = run_cli(dir, "status --db " + db);
  INFO(status.err);
  INFO(status.out);
  REQUIRE(status.exit_code == 0);
  const auto line_of = [&](const std::string& run) {
    const size_t at = status.out.find("\n  " + run + " ");
    return at == std::string::npos ? std::string()
                                   : status.out.substr(at + 1, status.out.find('\n', at + 1) - at - 1);
  };
  CHECK(line_of("run0-1").find(" {not json ") != std::string::npos);
  CHECK(line_of("run0-2").find(" \"\\xffA\" ") != std::string::npos);
  CHECK(line_of("run1-1").find(" 1 ") != std::string::npos);
  CHECK(status.out.find('\xff') == std::string::npos);
}
