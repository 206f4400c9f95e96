// The sweep loop against real trainer processes (the fake trainer): every fault docs/design.md §10 and
// the issue list — crashes, retries, divergence, bad configs, hangs, stops, a full database,
// a second orchestrator, an unwritable runs directory — with the results checked in SQLite.
#include <atomic>
#include <fstream>
#include <algorithm>
#include <mutex>
#include <set>

#include "catch.h"
#include "process_util.h"
#include "mxablate/contract/event_log.h"
#include "mxablate/orchestrator/sweep_lock.h"
#include "mxablate/results/sqlite_db.h"
#include "sweep_fixture.h"

using namespace mxablate;
using namespace mxablate::orchestrator;
using namespace mxablate::testing;
namespace fs = std::filesystem;

namespace {

// Every run: 20 steps, evaluations at steps 4, 8, 12, 16, 20, checkpoints every 5 steps.
constexpr int kEvals = 5;
constexpr int kSteps = 20;

void check_complete_and_unduplicated(SweepFixture& f) {
  for (const RunSpec& r : f.plan.runs) {
    INFO(run_label(r));
    const std::string where = " WHERE run_id = '" + r.run_id + "'";
    CHECK(f.scalar("SELECT COUNT(*) FROM evals" + where) == kEvals);
    CHECK(f.scalar("SELECT COUNT(DISTINCT step) FROM evals" + where) == kEvals);
    CHECK(f.scalar("SELECT COUNT(*) FROM train_steps" + where) == kSteps);
    CHECK(f.scalar("SELECT COUNT(DISTINCT step) FROM train_steps" + where) == kSteps);
  }
}

// Keeps the sweep's messages (warnings, launches, results) for the test to read.
struct MessageLog : ProgressSink {
  std::vector<std::string> lines;
  void message(const std::string& line) override { lines.push_back(line); }
  void update(const SweepSnapshot&) override {}
  void finish(const SweepSnapshot&) override {}
  int count(const std::string& part) const {
    return static_cast<int>(std::count_if(lines.begin(), lines.end(), [&](const std::string& l) {
      return l.find(part) != std::string::npos;
    }));
  }
};

}  // namespace

TEST_CASE("a sweep runs every planned run in parallel slots, running it again runs nothing") {
  ScopedEnv env({{"MXABLATE_FAKE_STEP_MS", "5"}});
  SweepFixture f(fake_recipe("all-runs", kSteps, 4, 5, "[1, 2, 3]"));
  f.slots = 3;
  std::mutex m;
  int max_running = 0, launches = 0;
  std::set<std::string> running;
  SweepHooks hooks;
  hooks.launched = [&](const std::string& id, auto) {
    std::lock_guard lock(m);
    ++launches;
    running.insert(id);
    max_running = std::max(max_running, static_cast<int>(running.size()));
  };
  // A slot is free for the next run once its run has written run_end (its trainer may still be
  // tearing down: docs/design.md §9, "Busy slots"), or once it has exited without one.
  hooks.run_end_seen = hooks.exit_seen = [&](const std::string& id, auto) {
    std::lock_guard lock(m);
    running.erase(id);
  };
  TestWaker waker;
  const SweepResult r = f.run(waker, hooks);
  CHECK(r.total == 6);
  CHECK(r.budget_exhausted == 6);
  CHECK(r.all_finished());
  CHECK(launches == 6);
  CHECK(max_running == 3);
  check_complete_and_unduplicated(f);
  CHECK(f.scalar("SELECT COUNT(*) FROM runs WHERE attempts = 1 AND status = 'budget_exhausted'") == 6);
  CHECK(f.scalar("SELECT COUNT(*) FROM run_axes WHERE axis = 'seed'") == 6);
  CHECK(f.scalar<std::string>("SELECT value FROM run_axes WHERE run_id = '" +
                              f.run_of("B", 3).run_id + "'") == "3");
  // Quantization telemetry every 5 steps for each MXFP4 GEMM: B only, 3 GEMMs × 4.
  CHECK(f.scalar("SELECT COUNT(*) FROM quant_stats WHERE run_id = '" + f.run_of("B", 1).run_id +
                 "'") == 12);
  CHECK(f.scalar("SELECT COUNT(*) FROM quant_stats WHERE run_id = '" + f.run_of("A", 1).run_id +
                 "'") == 0);
  CHECK(f.scalar("SELECT COUNT(*) FROM attempts WHERE outcome = 'budget_exhausted' AND "
                 "exit_code = 0 AND executor = 'local'") == 6);
  const fs::path dir = run_directory(f.options.runs_dir, "all-runs", f.run_of("A", 2).run_id);
  CHECK(fs::exists(dir / "config.json"));
  CHECK(contract::read_run_config((dir / "config.json").string()).train.seed == 2);

  launches = 0;
  const SweepResult again = f.run(waker, hooks);
  CHECK(again.budget_exhausted == 6);
  CHECK(launches == 0);
  CHECK(f.scalar("SELECT MAX(attempts) FROM runs") == 1);
}

TEST_CASE("a trainer SIGKILLed mid-run resumes from its checkpoint and ends as if never killed") {
  SweepFixture reference(fake_recipe("resume", kSteps, 4, 5));
  REQUIRE(reference.run().budget_exhausted == 4);

  // Every run kills itself at step 13 (after the checkpoint at 10 and the eval at 12), leaving
  // half an event line behind.
  ScopedEnv env({{"MXABLATE_FAKE_CRASH_AT_STEP", "13"}, {"MXABLATE_FAKE_TORN_TAIL", "1"}});
  SweepFixture crashed(fake_recipe("resume", kSteps, 4, 5));
  const SweepResult r = crashed.run();
  CHECK(r.budget_exhausted == 4);
  check_complete_and_unduplicated(crashed);
  CHECK(crashed.scalar("SELECT COUNT(*) FROM attempts WHERE attempt = 1 AND signal = 9 AND "
                       "outcome = 'retry'") == 4);
  CHECK(crashed.scalar("SELECT COUNT(*) FROM attempts WHERE attempt = 2 AND resumed = 1 AND "
                       "outcome = 'budget_exhausted'") == 4);
  CHECK(crashed.scalar("SELECT COUNT(*) FROM events WHERE kind = 'resume'") == 4);
  // The evaluation curves are exactly those of the uninterrupted sweep (same run ids too).
  const std::string curve = "SELECT run_id, step, tokens, val_loss FROM evals ORDER BY run_id, step";
  CHECK(crashed.rows(curve) == reference.rows(curve));
  CHECK(crashed.rows("SELECT run_id, best_val_loss, final_val_loss FROM runs ORDER BY run_id") ==
        reference.rows("SELECT run_id, best_val_loss, final_val_loss FROM runs ORDER BY run_id"));
}

TEST_CASE("a crash before the first checkpoint restarts the run from scratch, nothing doubled") {
  ScopedEnv env({{"MXABLATE_FAKE_CRASH_AT_STEP", "3@A/1"}});
  SweepFixture f(fake_recipe("restart", kSteps, 2, 5));
  CHECK(f.run().budget_exhausted == 4);
  const RunSpec& a1 = f.run_of("A", 1);
  CHECK(f.scalar("SELECT attempts FROM runs WHERE run_id = '" + a1.run_id + "'") == 2);
  CHECK(f.scalar("SELECT resumed FROM attempts WHERE attempt = 2 AND run_id = '" + a1.run_id +
                 "'") == 0);
  const fs::path dir = run_directory(f.options.runs_dir, "restart", a1.run_id);
  CHECK(fs::exists(dir / "events.jsonl.discarded-1"));  // the lost attempt's log, kept
  CHECK(f.scalar("SELECT COUNT(*) FROM evals WHERE run_id = '" + a1.run_id + "'") == 10);
  CHECK(f.scalar("SELECT COUNT(DISTINCT step) FROM evals WHERE run_id = '" + a1.run_id + "'") == 10);
  CHECK(f.scalar("SELECT COUNT(*) FROM train_steps WHERE run_id = '" + a1.run_id + "'") == kSteps);
}

TEST_CASE("a run that crashes on every attempt fails after the limit, the others finish") {
  ScopedEnv env({{"MXABLATE_FAKE_CRASH_AT_STEP", "6@A/1"}, {"MXABLATE_FAKE_CRASH_ALWAYS", "1@A/1"}});
  SweepFixture f(fake_recipe("crashy", kSteps, 4, 5));
  f.options.max_attempts = 3;
  const SweepResult r = f.run();
  CHECK(r.failed == 1);
  CHECK(r.budget_exhausted == 3);
  const std::string id = f.run_of("A", 1).run_id;
  CHECK(f.scalar("SELECT attempts FROM runs WHERE run_id = '" + id + "'") == 3);
  CHECK(f.scalar<std::string>("SELECT status FROM runs WHERE run_id = '" + id + "'") == "failed");
  const std::string error = f.scalar<std::string>("SELECT error FROM runs WHERE run_id = '" + id + "'");
  CHECK(error == "killed by signal 9 (SIGKILL) without a final status; gave up after 3 attempts");
  // Its surviving timeline: steps up to the last checkpoint (5) only, each once.
  CHECK(f.scalar("SELECT COUNT(*) FROM evals WHERE run_id = '" + id + "'") == 1);
}

TEST_CASE("a diverged run is a result, recorded with its divergence event, never retried") {
  ScopedEnv env({{"MXABLATE_FAKE_DIVERGE_AT_STEP", "7@B"}});
  SweepFixture f(fake_recipe("diverge", kSteps, 4, 5));
  const SweepResult r = f.run();
  CHECK(r.diverged == 2);
  CHECK(r.budget_exhausted == 2);
  CHECK(r.failed == 0);
  CHECK(f.scalar("SELECT COUNT(*) FROM runs WHERE arm = 'B' AND status = 'diverged' AND "
                 "attempts = 1") == 2);
  CHECK(f.scalar("SELECT COUNT(*) FROM divergence_events WHERE reason = 'nonfinite_loss' AND "
                 "severity = 'fatal' AND step = 7") == 2);
  CHECK(f.scalar("SELECT COUNT(*) FROM train_steps WHERE loss IS NULL") == 2);
}

TEST_CASE("a trainer that exits at once (bad config) fails with its message, others are fine") {
  ScopedEnv env({{"MXABLATE_FAKE_EXIT", "2@A/2"}});
  SweepFixture f(fake_recipe("badconfig", kSteps, 4, 5));
  const SweepResult r = f.run();
  CHECK(r.failed == 1);
  CHECK(r.budget_exhausted == 3);
  const std::string id = f.run_of("A", 2).run_id;
  CHECK(f.scalar("SELECT attempts FROM runs WHERE run_id = '" + id + "'") == 1);
  CHECK(f.scalar<std::string>("SELECT error FROM runs WHERE run_id = '" + id + "'") ==
        "the trainer rejected config.json (exit code 2): mxablate-fake-train: exiting with code "
        "2 as MXABLATE_FAKE_EXIT asks");
}

TEST_CASE("a trainer reporting failure in run_end is not retried") {
  ScopedEnv env({{"MXABLATE_FAKE_FAIL_AT_STEP", "9@B/1"}});
  SweepFixture f(fake_recipe("fails", kSteps, 4, 5));
  CHECK(f.run().failed == 1);
  const std::string id = f.run_of("B", 1).run_id;
  CHECK(f.scalar("SELECT attempts FROM runs WHERE run_id = '" + id + "'") == 1);
  CHECK(f.scalar<std::string>("SELECT error FROM runs WHERE run_id = '" + id + "'") ==
        "the trainer reported failure (exit code 1): mxablate-fake-train: simulated internal "
        "error at step 9");
}

TEST_CASE("a hung trainer is stopped at the timeout, killed if it ignores SIGTERM") {
  const bool ignores_term = GENERATE(false, true);
  INFO("ignores SIGTERM: " << ignores_term);
  std::map<std::string, std::string> vars{{"MXABLATE_FAKE_HANG_AT_STEP", "3@B/1"},
                                          {"MXABLATE_FAKE_STEP_MS", "2"}};
  if (ignores_term) vars["MXABLATE_FAKE_HANG_IGNORES_TERM"] = "1";
  ScopedEnv env(vars);
  SweepFixture f(fake_recipe("hang", kSteps, 4, 5));
  f.options.timeout = std::chrono::milliseconds(1500);
  f.options.grace = std::chrono::milliseconds(300);
  const auto t0 = std::chrono::steady_clock::now();
  const SweepResult r = f.run();
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(15));
  CHECK(r.failed == 1);
  CHECK(r.budget_exhausted == 3);
  const std::string id = f.run_of("B", 1).run_id;
  const std::string error = f.scalar<std::string>("SELECT error FROM runs WHERE run_id = '" + id + "'");
  CHECK(contains(error, "timed out after 2 s (the per-run limit; "));
  CHECK(f.scalar("SELECT attempts FROM runs WHERE run_id = '" + id + "'") == 1);
  if (ignores_term) {
    CHECK(f.scalar("SELECT signal FROM attempts WHERE run_id = '" + id + "'") == SIGKILL);
  } else {
    CHECK(f.scalar("SELECT exit_code FROM attempts WHERE run_id = '" + id + "'") == 4);
  }
}

TEST_CASE("a stop request checkpoints the running trainers, the next run resumes them") {
  ScopedEnv env({{"MXABLATE_FAKE_STEP_MS", "25"}});
  SweepFixture f(fake_recipe("stop", kSteps, 4, 5));
  std::atomic<int> events_seen{0};
  SweepHooks hooks;
  hooks.ingested = [&](size_t n, auto) { events_seen += static_cast<int>(n); };
  TestWaker waker;
  waker.stops = [&] { return events_seen > 12 ? 1 : 0; };  // a few steps into the first runs
  const SweepResult r = f.run(waker, hooks);
  CHECK(r.stop_signal == SIGINT);
  CHECK(r.interrupted == 2);  // the two that were running
  CHECK(r.unfinished == 2);   // never launched
  CHECK(f.scalar("SELECT COUNT(*) FROM attempts WHERE outcome = 'interrupted' AND exit_code = 4") == 2);
  CHECK(f.scalar("SELECT COUNT(*) FROM runs WHERE status = 'interrupted' AND error = "
                 "'stopped on request after checkpointing'") == 2);
  CHECK(f.scalar("SELECT COUNT(*) FROM events WHERE kind = 'run_end' AND "
                 "json_extract(detail, '$.status') = 'interrupted'") == 2);

  const SweepResult again = f.run();
  CHECK(again.budget_exhausted == 4);
  CHECK(f.scalar("SELECT COUNT(*) FROM attempts WHERE attempt = 2 AND resumed = 1") == 2);
  check_complete_and_unduplicated(f);
}

TEST_CASE("a database that fills up mid-sweep stops the trainers, the same sweep then finishes") {
  ScopedEnv env({{"MXABLATE_FAKE_STEP_MS", "3"}});
  SweepFixture f(fake_recipe("full", 200, 4, 5));
  {
    results::ResultsStore store(f.db_path());
    // A full disk as SQLite sees it: this connection may not grow the file beyond a few pages.
    results::Statement pages(store.db(), "PRAGMA page_count");
    pages.step();
    const int64_t now = pages.get_int(0);
    pages.reset();
    store.db().exec("PRAGMA max_page_count = " + std::to_string(now + 8));
    TestWaker waker;
    try {
      f.run(waker, {}, &store);
      FAIL("expected the sweep to fail");
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      CHECK(contains(what, "database or disk is full"));
      CHECK(contains(what, "re-run the same command to continue"));
    }
  }
  // No trainer of this sweep is left running.
  CHECK(test::count_live_processes({(f.options.runs_dir / "full").string()}) == 0);
  const SweepResult r = f.run();  // a normal store: room again
  CHECK(r.budget_exhausted == 4);
  for (const RunSpec& run : f.plan.runs)
    CHECK(f.scalar("SELECT COUNT(*) FROM evals WHERE run_id = '" + run.run_id + "'") == 50);
  CHECK(f.scalar("SELECT COUNT(*) FROM train_steps") == 4 * 200);
}

TEST_CASE("a second orchestrator on the same sweep is refused") {
  SweepFixture f(fake_recipe("locked", kSteps, 4, 5));
  SweepLock held(f.options.runs_dir / "locked");
  try {
    f.run();
    FAIL("expected a refusal");
  } catch (const SweepLocked& e) {
    CHECK(contains(e.what(), "another mxablate (pid " + std::to_string(::getpid()) + ")"));
  }
}

TEST_CASE("an unwritable runs directory is one clear error before anything runs") {
  SweepFixture f(fake_recipe("nowrite", kSteps, 4, 5));
  write_file(f.dir.path() / "a-file", "x");
  f.options.runs_dir = f.dir.path() / "a-file" / "runs";
  try {
    f.run();
    FAIL("expected an error");
  } catch (const std::runtime_error& e) {
    CHECK(contains(e.what(), "cannot create the runs directory " +
                                 (f.dir.path() / "a-file" / "runs" / "nowrite").string() +
                                 ": Not a directory"));
  }
}

TEST_CASE("impossible event lines are one warning each, never data, and never block the sweep") {
  ScopedEnv env({{"MXABLATE_FAKE_STEP_MS", "25"}});
  SweepFixture f(fake_recipe("badlines", kSteps, 4, 5));
  std::atomic<int> events_seen{0};
  SweepHooks hooks;
  hooks.ingested = [&](size_t n, auto) { events_seen += static_cast<int>(n); };
  TestWaker waker;
  waker.stops = [&] { return events_seen > 12 ? 1 : 0; };
  REQUIRE(f.run(waker, hooks).interrupted == 2);

  // Hostile lines after what one interrupted run wrote, and an attempt left open as if the
  // orchestrator had died: the next run recovers it (the recovery path reads these lines).
  std::string run_id;
  {
    results::ResultsStore store(f.db_path());
    for (const auto& r : store.planned_runs(1))
      if (r.status == "interrupted") run_id = r.run_id;
    REQUIRE_FALSE(run_id.empty());
    store.begin_attempt(run_id, {"local", "999999999", "cpu0", "host", "cpu", true, 0});
  }
  const fs::path log = f.options.runs_dir / "badlines" / run_id / "events.jsonl";
  int64_t lines_before = 0;
  {
    std::ifstream in(log);
    for (std::string l; std::getline(in, l);) ++lines_before;
  }
  {
    std::ofstream out(log, std::ios::app | std::ios::binary);
    out << R"({"seq":100000,"kind":"eval","time":1,"step":30,"tokens":3000,"val_loss":1e999})" "\n"
        << R"({"seq":1,"kind":"eval","time":1,"step":30,"tokens":3000,"val_loss":0.001})" "\n"
        << R"({"seq":2,"kind":"target_reached","time":1,"step":30,"tokens":3000,"val_loss":0.001})" "\n";
    const char nul_line[] = "{\"seq\":3,\"kind\":\"eval\",\0}\n";
    out.write(nul_line, sizeof nul_line - 1);
  }
  MessageLog messages;
  f.progress_sink = &messages;
  const SweepResult again = f.run();
  INFO([&] {
    std::string all;
    for (const auto& l : messages.lines) all += l + "\n";
    return all;
  }());
  CHECK(again.budget_exhausted == 4);
  CHECK(messages.count("[" + run_id + "]: events.jsonl line " + std::to_string(lines_before + 1) +
                       ": a number does not fit a double; line skipped") == 1);
  CHECK(messages.count("[" + run_id + "]: events.jsonl line " + std::to_string(lines_before + 2) +
                       ": seq 1 does not follow seq") == 1);
  CHECK(messages.count("[" + run_id + "]: events.jsonl line " + std::to_string(lines_before + 3) +
                       ": seq 2 does not follow seq") == 1);
  CHECK(messages.count("[" + run_id + "]: events.jsonl line " + std::to_string(lines_before + 4) +
                       ": NUL byte in the line; line skipped") == 1);
  CHECK(messages.count("recovered ") == 1);
  // None of it became data.
  CHECK(f.scalar("SELECT COUNT(*) FROM evals WHERE val_loss < 0.01 OR val_loss IS NULL") == 0);
  CHECK(f.scalar("SELECT COUNT(*) FROM events WHERE kind = 'target_reached'") == 0);
  CHECK(f.scalar("SELECT COUNT(*) FROM runs WHERE tokens_to_target IS NOT NULL") == 0);
  check_complete_and_unduplicated(f);
}

TEST_CASE("a run directory deleted during the sweep: its rows are re-read, never misattributed") {
  ScopedEnv env({{"MXABLATE_FAKE_STEP_MS", "25"}});
  SweepFixture f(fake_recipe("deleted", kSteps, 4, 5));
  f.slots = 1;
  MessageLog messages;
  f.progress_sink = &messages;
  std::atomic<bool> deleted{false};
  std::string victim;
  SweepHooks hooks;
  std::atomic<int> events_seen{0};
  hooks.launched = [&](const std::string& run_id, auto) {
    if (victim.empty()) victim = run_id;
  };
  hooks.ingested = [&](size_t n, auto) {
    events_seen += static_cast<int>(n);
    // Mid-run: the user deletes the run directory (the trainer keeps writing to the unlinked
    // log, then its run_end is gone with it).
    if (!deleted && events_seen > 10) {
      deleted = true;
      fs::remove_all(f.options.runs_dir / "deleted" / victim);
    }
  };
  TestWaker waker;
  const SweepResult r = f.run(waker, hooks);
  INFO([&] {
    std::string all;
    for (const auto& l : messages.lines) all += l + "\n";
    return all;
  }());
  REQUIRE(deleted);
  CHECK(messages.count("[" + victim + "]: events.jsonl is gone") == 1);
  CHECK(r.total == 4);
  // Whatever the victim ended as, its rows are exactly those of the log now in its directory.
  const fs::path log = f.options.runs_dir / "deleted" / victim / "events.jsonl";
  const auto events = fs::exists(log) ? contract::read_effective_events(log.string())
                                      : std::vector<nlohmann::json>{};
  const std::string where = " WHERE run_id = '" + victim + "'";
  CHECK(f.scalar("SELECT (SELECT COUNT(*) FROM evals" + where + ") + (SELECT COUNT(*) FROM "
                 "train_steps" + where + ") + (SELECT COUNT(*) FROM quant_stats" + where +
                 ") + (SELECT COUNT(*) FROM events" + where + ")") ==
        static_cast<int64_t>(events.size()));
  // A second run of the sweep finishes it, every run complete once.
  f.progress_sink = nullptr;
  const SweepResult again = f.run();
  CHECK(again.budget_exhausted + r.budget_exhausted >= 4);
  check_complete_and_unduplicated(f);
}

namespace {

// Three arms in plan order A, W, C: W's runs have 2 ranks (parallel.data 2), A's and C's one.
std::string ranks_recipe(const std::string& seeds = "[1]") {
  std::string text = fake_recipe("ranks", kSteps, 4, 5, seeds);
  const size_t arms = text.find("arms:");
  const size_t grid = text.find("grid:");
  return text.substr(0, arms) +
         "arms:\n"
         "  A: {}\n"
         "  W: {parallel: {data: 2}, train: {micro_batch_tokens: 512}}\n"
         "  C: {train: {lr: 0.002}}\n" +
         text.substr(grid);
}

// The order runs were launched in (by arm), and the most slots ever taken at once.
struct LaunchTrace {
  SweepFixture& f;
  std::mutex m;
  std::vector<std::string> arms;
  std::map<std::string, int> ranks_running;
  int slots_used = 0, max_slots_used = 0;
  explicit LaunchTrace(SweepFixture& fixture) : f(fixture) {}
  SweepHooks hooks() {
    SweepHooks h;
    h.launched = [this](const std::string& run_id, auto) {
      std::lock_guard lock(m);
      for (const RunSpec& r : f.plan.runs)
        if (r.run_id == run_id) {
          arms.push_back(r.arm);
          ranks_running[run_id] = r.config.parallel.data;
          slots_used += r.config.parallel.data;
        }
      max_slots_used = std::max(max_slots_used, slots_used);
    };
    // Its slots are free for other runs from its run_end (or its exit, without one): a standby
    // may take one while the trainer still tears down (docs/design.md §9, "Busy slots").
    h.run_end_seen = h.exit_seen = [this](const std::string& run_id, auto) {
      std::lock_guard lock(m);
      const auto it = ranks_running.find(run_id);
      if (it == ranks_running.end()) return;
      slots_used -= it->second;
      ranks_running.erase(it);
    };
    return h;
  }
};

}  // namespace

TEST_CASE("runs of 1 and 2 ranks share the slots: a 2-rank run takes two and all finish") {
  ScopedEnv env({{"MXABLATE_FAKE_STEP_MS", "5"}});
  SweepFixture f(ranks_recipe("[1, 2]"));
  f.slots = 2;
  LaunchTrace trace(f);
  TestWaker waker;
  const SweepResult r = f.run(waker, trace.hooks());
  CHECK(r.total == 6);
  CHECK(r.budget_exhausted == 6);
  CHECK(r.all_finished());
  CHECK(trace.arms.size() == 6);
  CHECK(trace.max_slots_used == 2);  // never more ranks at once than slots
  check_complete_and_unduplicated(f);
  // A 2-rank run's attempts name both of its slots.
  const std::string w = f.run_of("W", 1).run_id;
  CHECK(f.scalar<std::string>("SELECT slot FROM attempts WHERE run_id = '" + w + "'") ==
        "cpu0+cpu1");
  CHECK(f.scalar("SELECT COUNT(*) FROM attempts WHERE slot LIKE '%+%'") == 2);
  CHECK(contract::read_run_config(
            (run_directory(f.options.runs_dir, "ranks", w) / "config.json").string())
            .parallel.data == 2);
}

TEST_CASE("a run waiting for more slots: later runs start ahead of it only within --backfill") {
  ScopedEnv env({{"MXABLATE_FAKE_STEP_MS", "5"}});
  SweepFixture f(ranks_recipe());
  f.slots = 2;
  SECTION("backfill 0: strictly in plan order — C waits until W has started") {
    f.options.backfill = std::chrono::milliseconds(0);
    LaunchTrace trace(f);
    TestWaker waker;
    CHECK(f.run(waker, trace.hooks()).budget_exhausted == 3);
    CHECK(trace.arms == std::vector<std::string>{"A", "W", "C"});
  }
  SECTION("a long backfill window: C takes the free slot while W waits for two") {
    f.options.backfill = std::chrono::hours(1);
    LaunchTrace trace(f);
    TestWaker waker;
    CHECK(f.run(waker, trace.hooks()).budget_exhausted == 3);
    CHECK(trace.arms == std::vector<std::string>{"A", "C", "W"});
  }
}

TEST_CASE("once the backfill window has passed, no later run starts ahead of the waiting one") {
  // A1 A2 W1 W2 C1 C2 with 2 slots: A1 and A2 start, W1 waits for two slots. The window (1 ms)
  // passes at once, so when A1 ends first, its free slot stays free for W1 instead of going to C1.
  ScopedEnv env({{"MXABLATE_FAKE_STEP_MS", "5@A/1"}, {"MXABLATE_FAKE_STARTUP_MS", "1000@A/2"}});
  SweepFixture f(ranks_recipe("[1, 2]"));
  f.slots = 2;
  f.options.backfill = std::chrono::milliseconds(1);
  MessageLog log;
  f.progress_sink = &log;
  LaunchTrace trace(f);
  TestWaker waker;
  CHECK(f.run(waker, trace.hooks()).budget_exhausted == 6);
  CHECK(trace.arms == std::vector<std::string>{"A", "A", "W", "W", "C", "C"});
  CHECK(trace.max_slots_used == 2);
  CHECK(log.count("for 2 free slot(s): later runs no longer start before it") == 1);
}

TEST_CASE("runs start in SweepOptions::launch_order, those it leaves out after it in plan order") {
  ScopedEnv env({{"MXABLATE_FAKE_STEP_MS", "1"}});
  SweepFixture f(fake_recipe("order", kSteps, 4, 5, "[1, 2]"));  // A1 A2 B1 B2
  f.slots = 1;
  // Ids of no run of this plan, and repeats, are ignored.
  f.options.launch_order = {f.run_of("B", 2).run_id, "0123456789abcdef", f.run_of("B", 2).run_id,
                            f.run_of("A", 2).run_id};
  std::vector<std::string> launched;
  std::mutex m;
  SweepHooks hooks;
  hooks.launched = hooks.prestarted = [&](const std::string& run_id, auto) {
    std::lock_guard lock(m);
    launched.push_back(run_id);
  };
  TestWaker waker;
  CHECK(f.run(waker, hooks).budget_exhausted == 4);
  // With prestart, a run is seen once as a standby (prestarted) and once launched: first sight.
  std::vector<std::string> first;
  for (const std::string& id : launched)
    if (std::find(first.begin(), first.end(), id) == first.end()) first.push_back(id);
  CHECK(first == std::vector<std::string>{f.run_of("B", 2).run_id, f.run_of("A", 2).run_id,
                                          f.run_of("A", 1).run_id, f.run_of("B", 1).run_id});
}

TEST_CASE("a run of more ranks than the executor has slots fails alone, never waits forever") {
  ScopedEnv env({{"MXABLATE_FAKE_STEP_MS", "1"}});
  SweepFixture f(ranks_recipe());
  f.slots = 1;
  const SweepResult r = f.run();
  CHECK(r.budget_exhausted == 2);
  CHECK(r.failed == 1);
  CHECK(f.scalar<std::string>("SELECT error FROM runs WHERE run_id = '" + f.run_of("W", 1).run_id +
                              "'") ==
        "parallel.data 2: the local executor can give one run at most 1 rank(s)");
}
