// The small formatting pieces of plan / status / query / progress output. (CSV fields and the
// other formats' escaping: tests/analysis/escape_test.cpp.)
#include "catch.h"
#include "mxablate/orchestrator/progress.h"
#include "mxablate/orchestrator/text_table.h"

using namespace mxablate::orchestrator;

TEST_CASE("text tables align text left and numbers right") {
  TextTable t({"arm", "seed", "loss"});
  t.add_row({"fp8", "1", "3.25"});
  t.add_row({"FDW+H16", "12", "-"});
  CHECK(t.render() ==
        "arm      seed  loss\n"
        "fp8         1  3.25\n"
        "FDW+H16    12     -\n");
  CHECK(t.render(2).rfind("  arm", 0) == 0);
}

// Cells come from recipes and the database: an escape sequence would recolor or clear the
// terminal, a newline would start a fake row. They are shown, and aligned, as visible text.
TEST_CASE("text tables show control characters and stray bytes as escapes, aligned") {
  TextTable t({"arm\x1b[2J", "note"});
  t.add_row({"fp8", "ok"});
  t.add_row({"a\nb", "\x1b]0;title\x07\xff"});
  CHECK(t.render() ==
        "arm\\x1b[2J  note\n"
        "fp8         ok\n"
        "a\\x0ab      \\x1b]0;title\\x07\\xff\n");
}

TEST_CASE("durations parse with units and reject nonsense") {
  CHECK(parse_duration_ms("90") == 90000);
  CHECK(parse_duration_ms("90s") == 90000);
  CHECK(parse_duration_ms("1.5m") == 90000);
  CHECK(parse_duration_ms("2h") == 7200000);
  CHECK(parse_duration_ms("250ms") == 250);
  CHECK(parse_duration_ms("0") == 0);
  for (const char* bad : {"", "fast", "-5", "10d", "5 s"}) CHECK_THROWS_AS(parse_duration_ms(bad), std::invalid_argument);
}

TEST_CASE("durations and counts print compactly") {
  CHECK(format_duration(5.4) == "5s");
  CHECK(format_duration(245) == "4m05s");
  CHECK(format_duration(3725) == "1h02m");
  CHECK(format_duration(std::nullopt) == "?");
  CHECK(format_count(12) == "12");
  CHECK(format_count(2048) == "2.05k");
  CHECK(format_count(100e6) == "100M");
  CHECK(format_count(2.1e9) == "2.1G");
}

TEST_CASE("the progress block shows counts and each running run's step, tokens, loss and ETA") {
  SweepSnapshot s;
  s.sweep = "demo";
  s.total = 6;
  s.pending = 2;
  s.running = 1;
  s.finished = 2;
  s.failed = 1;
  s.elapsed_s = 75;
  RunProgress p;
  p.label = "FDW seed=2";
  p.attempt = 2;
  p.step = 120;
  p.tokens = 250e3;
  p.max_tokens = 1e6;
  p.loss = 3.14159;
  p.val_loss = 3.3;
  p.tokens_per_s = 5000;
  s.active.push_back(p);
  CHECK(p.eta_s() == Approx(150.0));
  const auto lines = render_progress_block(s, 200);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0] == "sweep demo: 6 runs — 2 pending, 1 running, 2 finished, 0 diverged, 1 failed "
                    "(1m15s elapsed)");
  CHECK(lines[1].find("FDW seed=2") != std::string::npos);
  CHECK(lines[1].find("#2") != std::string::npos);
  CHECK(lines[1].find("step     120") != std::string::npos);
  CHECK(lines[1].find("250k/1M") != std::string::npos);
  CHECK(lines[1].find("25.0%") != std::string::npos);
  CHECK(lines[1].find("loss  3.1416") != std::string::npos);
  CHECK(lines[1].find("ETA  2m30s") != std::string::npos);
  CHECK(render_progress_block(s, 40)[1].size() == 40);  // clipped to the terminal
  // Clipping counts columns, not bytes: the summary's "—" is one column.
  const std::string summary = render_progress_block(s, 30)[0];
  CHECK(summary == "sweep demo: 6 runs — 2 pending");
  p.tokens_per_s.reset();
  CHECK_FALSE(p.eta_s());
}

TEST_CASE("the progress block shows a hostile sweep name and run label as text") {
  SweepSnapshot s;
  s.sweep = "demo\x1b[2J";
  RunProgress p;
  p.label = "FDW\r\x1b[1A seed=1";
  s.active.push_back(p);
  const auto lines = render_progress_block(s, 200);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0].rfind("sweep demo\\x1b[2J: 0 runs", 0) == 0);
  CHECK(lines[1].rfind("  FDW\\x0d\\x1b[1A seed=1 ", 0) == 0);
  CHECK(render_summary_line(s).find('\x1b') == std::string::npos);
}
