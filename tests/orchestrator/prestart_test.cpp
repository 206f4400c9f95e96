// Busy slots (docs/design.md §9): the next run of a busy slot is prestarted as a standby, sets up
// while the slot still trains, and trains the moment the slot frees. Checked against real
// trainer processes (the fake trainer speaks the same standby protocol, contract/standby.h):
// the overlap itself, identical results with and without it, a standby failing its setup, a
// stopped sweep, an orchestrator killed while a standby waits, `--no-prestart`, the busy figures
// `mxablate status` prints, and the protocol at the trainer's end.
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <fmt/format.h>
#include <fstream>
#include <mutex>
#include <regex>

#include "catch.h"
#include "process_util.h"
#include "mxablate/contract/event_log.h"
#include "mxablate/contract/standby.h"
#include "mxablate/trainer/plan/memory_plan.h"
#include "mxablate/results/sqlite_db.h"
#include "sweep_fixture.h"

using namespace mxablate;
using namespace mxablate::orchestrator;
using namespace mxablate::testing;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int kSteps = 20;  // evaluations at 4, 8, 12, 16, 20; checkpoints every 5 steps

std::string where_run(const std::string& run_id) { return " WHERE run_id = '" + run_id + "'"; }

void check_complete_and_unduplicated(SweepFixture& f) {
  for (const RunSpec& r : f.plan.runs) {
    INFO(run_label(r));
    CHECK(f.scalar("SELECT COUNT(*) FROM evals" + where_run(r.run_id)) == 5);
    CHECK(f.scalar("SELECT COUNT(DISTINCT step) FROM evals" + where_run(r.run_id)) == 5);
    CHECK(f.scalar("SELECT COUNT(*) FROM train_steps" + where_run(r.run_id)) == kSteps);
  }
}

// Trainer processes (live, not zombies) working in a run directory.
int trainers_in(const fs::path& run_dir) {
  return test::count_live_processes({"mxablate-fake-train", run_dir.string()});
}

fs::path dir_of(const SweepFixture& f, const RunSpec& r) {
  return run_directory(f.options.runs_dir, f.plan.sweep, r.run_id);
}

}  // namespace

TEST_CASE("prestart: the next run's trainer sets up while the slot's run trains, and its setup is not "
          "busy time") {
  ScopedEnv env({{"MXABLATE_FAKE_STEP_MS", "10"}, {"MXABLATE_FAKE_STARTUP_MS", "300"}});
  SweepFixture f(fake_recipe("overlap", kSteps, 4, 5, "[1]"));
  f.slots = 1;
  REQUIRE(f.plan.runs.size() == 2);
  const RunSpec& first = f.plan.runs[0];
  const RunSpec& second = f.plan.runs[1];
  std::mutex m;
  std::map<std::string, SweepHooks::Clock::time_point> prestarted, exited;
  int second_alive_when_first_ended = -1;
  SweepHooks hooks;
  hooks.prestarted = [&](const std::string& id, auto t) {
    std::lock_guard lock(m);
    prestarted[id] = t;
  };
  hooks.exit_seen = [&](const std::string& id, auto t) {
    std::lock_guard lock(m);
    exited[id] = t;
    if (id == first.run_id) second_alive_when_first_ended = trainers_in(dir_of(f, second));
  };
  TestWaker waker;
  const SweepResult r = f.run(waker, hooks);
  CHECK(r.budget_exhausted == 2);
  check_complete_and_unduplicated(f);
  // The second run's trainer existed (set up, waiting) before the first one ended.
  REQUIRE(prestarted.count(second.run_id) == 1);
  CHECK(prestarted.count(first.run_id) == 0);  // the slot was free: started normally
  CHECK(prestarted[second.run_id] < exited[first.run_id]);
  CHECK(second_alive_when_first_ended == 1);
  const std::string a = "SELECT prestarted, setup_s, standby_s, train_s, eval_s, "
                        "ended_at - launched_at, launched_at, ended_at FROM attempts";
  const auto one = f.rows(a + where_run(first.run_id));
  const auto two = f.rows(a + where_run(second.run_id));
  REQUIRE(one.size() == 1);
  REQUIRE(two.size() == 1);
  CHECK(one[0][0] == "0");
  CHECK(one[0][2] == "");  // no standby_s: it never waited
  CHECK(two[0][0] == "1");
  const auto num = [](const std::string& s) { return std::stod(s); };
  // Setup: the fake trainer's 300 ms "model build" at least, for both.
  CHECK(num(one[0][1]) >= 0.3);
  CHECK(num(two[0][1]) >= 0.3);
  CHECK(num(two[0][2]) > 0);  // it waited for the slot
  // The first attempt's span holds its setup; the prestarted one's does not (it overlapped the
  // first run): its span is shorter than its setup plus its busy time, and holds the busy time.
  const double busy2 = num(two[0][3]) + num(two[0][4]);
  CHECK(num(one[0][5]) > num(one[0][1]));
  CHECK(num(two[0][5]) >= busy2);
  CHECK(num(two[0][5]) < num(two[0][1]) + busy2);
  // Released once the first run had written its run_end (docs/design.md §9).
  CHECK(num(two[0][6]) >= f.scalar<double>("SELECT time FROM events WHERE kind = 'run_end'" +
                                           std::string(" AND run_id = '") + first.run_id + "'"));
  // run_start says so; the stderr log's header too.
  CHECK(f.scalar("SELECT COUNT(*) FROM events WHERE kind = 'run_start' AND "
                 "json_extract(detail, '$.prestarted') = 1") == 1);
  std::ifstream err(dir_of(f, second) / "stderr.log");
  std::string header;
  std::getline(err, header);
  CHECK(contains(header, "=== mxablate: attempt 1 (prestarted) in slot cpu0 at "));
}

namespace {

// One slot; what each run's trainer process looked like when the run after it was released.
struct Handovers {
  std::mutex m;
  std::map<std::string, SweepHooks::Clock::time_point> launched, run_end, exited;
  std::map<std::string, int> previous_alive;  // run id → trainers alive in the run before it
  SweepHooks hooks(SweepFixture& f) {
    SweepHooks h;
    h.launched = [this, &f](const std::string& id, auto t) {
      std::lock_guard lock(m);
      launched[id] = t;
      for (size_t i = 1; i < f.plan.runs.size(); ++i)
        if (f.plan.runs[i].run_id == id)
          previous_alive[id] = trainers_in(dir_of(f, f.plan.runs[i - 1]));
    };
    h.run_end_seen = [this](const std::string& id, auto t) {
      std::lock_guard lock(m);
      run_end[id] = t;
    };
    h.exit_seen = [this](const std::string& id, auto t) {
      std::lock_guard lock(m);
      exited[id] = t;
    };
    return h;
  }
  // Run `next` started training while `before`'s trainer was still tearing down.
  void check_released_at_run_end(const RunSpec& before, const RunSpec& next) {
    INFO(run_label(before) << " then " << run_label(next));
    REQUIRE(launched.count(next.run_id) == 1);
    REQUIRE(run_end.count(before.run_id) == 1);
    REQUIRE(exited.count(before.run_id) == 1);
    CHECK(launched[next.run_id] >= run_end[before.run_id]);
    CHECK(launched[next.run_id] < exited[before.run_id]);
    CHECK(previous_alive[next.run_id] == 1);
  }
};

}  // namespace

TEST_CASE("prestart: the standby takes the slot at the finishing run's run_end, while that trainer "
          "still tears down, and each run keeps its own result") {
  // 600 ms of teardown after every run_end; the next run trains during it.
  ScopedEnv env({{"MXABLATE_FAKE_STEP_MS", "5"}, {"MXABLATE_FAKE_STARTUP_MS", "100"},
                 {"MXABLATE_FAKE_LINGER_MS", "600"}});
  SweepFixture f(fake_recipe("handover", kSteps, 4, 5, "[1]"));
  f.slots = 1;
  REQUIRE(f.plan.runs.size() == 2);
  const RunSpec& first = f.plan.runs[0];
  const RunSpec& second = f.plan.runs[1];
  Handovers h;
  TestWaker waker;
  const SweepResult r = f.run(waker, h.hooks(f));
  CHECK(r.budget_exhausted == 2);
  check_complete_and_unduplicated(f);
  h.check_released_at_run_end(first, second);
  // In the store: the second attempt was launched (released) well before the first ended, and
  // trained then: its first event's time is before the first attempt's end.
  const auto t = [&](const std::string& sql) { return f.scalar<double>(sql); };
  const double first_ended = t("SELECT ended_at FROM attempts" + where_run(first.run_id));
  CHECK(t("SELECT launched_at FROM attempts" + where_run(second.run_id)) < first_ended - 0.3);
  CHECK(t("SELECT MIN(time) FROM events WHERE kind = 'train' AND run_id = '" + second.run_id +
          "'") < first_ended);
  // Each attempt its own: one each, its own outcome and exit, the second one prestarted.
  CHECK(f.rows("SELECT run_id, attempt, prestarted, exit_code, outcome FROM attempts ORDER BY "
               "launched_at") ==
        std::vector<std::vector<std::string>>{{first.run_id, "1", "0", "0", "budget_exhausted"},
                                              {second.run_id, "1", "1", "0", "budget_exhausted"}});
}

TEST_CASE("GPU runs whose predicted peaks do not fit the slot together wait for the finishing "
          "trainer's exit") {
  ScopedEnv env({{"MXABLATE_FAKE_STEP_MS", "5"}, {"MXABLATE_FAKE_STARTUP_MS", "50"},
                 {"MXABLATE_FAKE_LINGER_MS", "400"}});
  SweepFixture f(fake_recipe("handover-memory", kSteps, 4, 5, "[1]"));
  f.slots = 1;
  for (RunSpec& r : f.plan.runs) r.config.device = contract::Device::kCUDA;  // the fake ignores it
  const RunSpec& first = f.plan.runs[0];
  const RunSpec& second = f.plan.runs[1];
  f.options.handover.slot_bytes = 10;
  f.options.handover.peak_bytes = {{first.run_id, 6}, {second.run_id, 6}};
  Handovers h;
  TestWaker waker;
  CHECK(f.run(waker, h.hooks(f)).budget_exhausted == 2);
  check_complete_and_unduplicated(f);
  REQUIRE(h.launched.count(second.run_id) == 1);
  CHECK(h.launched[second.run_id] > h.exited[first.run_id]);  // 6 + 6 > 10: at the exit
  CHECK(h.previous_alive[second.run_id] == 0);
  CHECK(f.scalar<double>("SELECT launched_at FROM attempts" + where_run(second.run_id)) >=
        f.scalar<double>("SELECT ended_at FROM attempts" + where_run(first.run_id)));
}

TEST_CASE("a trainer that crashes or exits non-zero after its run_end keeps its result, once, and "
          "the standby behind it is not touched") {
  ScopedEnv env({{"MXABLATE_FAKE_STEP_MS", "5"}, {"MXABLATE_FAKE_STARTUP_MS", "50"},
                 {"MXABLATE_FAKE_LINGER_MS", "400"}, {"MXABLATE_FAKE_END_CRASH", "1@A/1"},
                 {"MXABLATE_FAKE_END_EXIT", "1@A/2"}});
  SweepFixture f(fake_recipe("handover-faults", kSteps, 4, 5, "[1, 2]"));
  f.slots = 1;
  REQUIRE(f.plan.runs.size() == 4);
  const RunSpec& crashes = f.run_of("A", 1);
  const RunSpec& fails = f.run_of("A", 2);
  REQUIRE(f.plan.runs[0].run_id == crashes.run_id);
  REQUIRE(f.plan.runs[1].run_id == fails.run_id);
  Handovers h;
  TestWaker waker;
  const SweepResult r = f.run(waker, h.hooks(f));
  CHECK(r.budget_exhausted == 4);
  CHECK(r.failed == 0);
  check_complete_and_unduplicated(f);
  for (size_t i = 1; i < f.plan.runs.size(); ++i)
    h.check_released_at_run_end(f.plan.runs[i - 1], f.plan.runs[i]);
  // The run_end decides (docs/design.md §9): the crash and the exit code are recorded with the
  // attempt that had them, and no run is retried or charged with another's end.
  CHECK(f.rows("SELECT run_id, attempt, exit_code, signal, outcome FROM attempts WHERE run_id IN ('" +
               crashes.run_id + "', '" + fails.run_id + "') ORDER BY launched_at") ==
        std::vector<std::vector<std::string>>{{crashes.run_id, "1", "", "9", "budget_exhausted"},
                                              {fails.run_id, "1", "1", "", "budget_exhausted"}});
  CHECK(f.scalar("SELECT COUNT(*) FROM attempts") == 4);
  CHECK(f.scalar("SELECT COUNT(*) FROM attempts WHERE outcome = 'budget_exhausted' AND exit_code = 0") == 2);
  CHECK(f.scalar("SELECT COUNT(*) FROM runs WHERE attempts = 1 AND status = 'budget_exhausted' AND "
                 "error IS NULL") == 4);
  // Every attempt has its own run_end's timings.
  CHECK(f.scalar("SELECT COUNT(*) FROM attempts WHERE train_s > 0 AND checkpoint_s >= 0") == 4);
}

TEST_CASE("prestarted runs produce the results of a sweep without prestart, and --no-prestart never "
          "starts a standby") {
  ScopedEnv env({{"MXABLATE_FAKE_STEP_MS", "5"}, {"MXABLATE_FAKE_STARTUP_MS", "50"}});
  const std::string text = fake_recipe("same", kSteps, 4, 5, "[1, 2, 3]");
  SweepFixture with(text), without(text);
  without.options.prestart = false;
  int standbys = 0;
  SweepHooks count;
  count.prestarted = [&](const std::string&, auto) { ++standbys; };
  TestWaker w1, w2;
  CHECK(with.run(w1).budget_exhausted == 6);
  CHECK(without.run(w2, count).budget_exhausted == 6);
  CHECK(standbys == 0);
  CHECK(without.scalar("SELECT COUNT(*) FROM attempts WHERE prestarted = 1") == 0);
  CHECK(with.scalar("SELECT COUNT(*) FROM attempts WHERE prestarted = 1") >= 3);
  CHECK(with.scalar("SELECT COUNT(*) FROM attempts") == 6);
  for (const char* sql :
       {"SELECT run_id, step, tokens, printf('%.17g', val_loss) FROM evals ORDER BY run_id, seq",
        "SELECT run_id, step, printf('%.17g', loss) FROM train_steps ORDER BY run_id, seq",
        "SELECT run_id, status, attempts, printf('%.17g', final_val_loss) FROM runs ORDER BY run_id"}) {
    INFO(sql);
    CHECK(with.rows(sql) == without.rows(sql));
  }
  check_complete_and_unduplicated(with);
}

TEST_CASE("a standby that fails its setup is an attempt of its own run, never the running one's") {
  ScopedEnv env({{"MXABLATE_FAKE_STEP_MS", "20"}, {"MXABLATE_FAKE_EXIT", "2@B/1"}});
  SweepFixture f(fake_recipe("standby-fails", kSteps, 4, 5, "[1, 2]"));
  f.slots = 1;
  REQUIRE(f.plan.runs.front().arm != "B");  // B/1 waits behind a running run: prestarted
  const std::string bad = f.run_of("B", 1).run_id;
  const SweepResult r = f.run();
  CHECK(r.failed == 1);
  CHECK(r.budget_exhausted == 3);
  CHECK(f.rows("SELECT attempt, prestarted, exit_code, outcome FROM attempts" + where_run(bad)) ==
        std::vector<std::vector<std::string>>{{"1", "1", "2", "failed"}});
  CHECK(contains(f.scalar<std::string>("SELECT error FROM runs" + where_run(bad)),
                 "exiting with code 2 as MXABLATE_FAKE_EXIT asks"));
  // Every other run: one attempt, its own result, no error.
  CHECK(f.scalar("SELECT COUNT(*) FROM runs WHERE status = 'budget_exhausted' AND attempts = 1 "
                 "AND error IS NULL") == 3);
  CHECK(f.scalar("SELECT COUNT(*) FROM attempts WHERE outcome = 'budget_exhausted' AND "
                 "exit_code = 0") == 3);
}

TEST_CASE("stopping the sweep ends the standby: it writes nothing, its run stays pending and the "
          "next run does it") {
  ScopedEnv env({{"MXABLATE_FAKE_STEP_MS", "40"}});
  SweepFixture f(fake_recipe("standby-stop", kSteps, 4, 5, "[1]"));
  f.slots = 1;
  const RunSpec& second = f.plan.runs[1];
  std::atomic<bool> standby{false};
  std::atomic<int> events{0};
  SweepHooks hooks;
  hooks.prestarted = [&](const std::string&, auto) { standby = true; };
  hooks.ingested = [&](size_t n, auto) { events += static_cast<int>(n); };
  TestWaker waker;
  waker.stops = [&] { return standby && events > 6 ? 1 : 0; };
  const SweepResult r = f.run(waker, hooks);
  CHECK(r.stop_signal == SIGINT);
  CHECK(r.interrupted == 1);
  CHECK(r.unfinished == 1);
  CHECK(f.scalar<std::string>("SELECT status FROM runs" + where_run(second.run_id)) == "pending");
  CHECK(f.scalar("SELECT attempts FROM runs" + where_run(second.run_id)) == 0);
  std::error_code ec;
  CHECK(fs::file_size(dir_of(f, second) / "events.jsonl", ec) == static_cast<uintmax_t>(-1));
  CHECK(eventually([&] { return trainers_in(dir_of(f, second)) == 0; }, std::chrono::seconds(10)));

  const SweepResult again = f.run();
  CHECK(again.budget_exhausted == 2);
  check_complete_and_unduplicated(f);
  CHECK(f.scalar("SELECT attempts FROM runs" + where_run(second.run_id)) == 1);
}

TEST_CASE("the orchestrator killed while a standby waits: the standby exits, writing nothing, and the "
          "next run does its run, nothing lost or doubled") {
  TempDir dir;
  const fs::path recipe = dir.path() / "killed.yaml";
  write_file(recipe, fake_recipe("killed", kSteps, 4, 5, "[1]"));
  const std::vector<std::string> args{kMxablate.string(), "run", recipe.string(), "--trainer",
                                      kFakeTrainer.string(), "--cpu", "1", "--poll-ms", "20",
                                      "--progress", "plain"};
  const fs::path runs = dir.path() / "runs";
  Process p(args, dir.path(), {{"MXABLATE_FAKE_STEP_MS", "100"}});
  // The running trainer and its slot's standby.
  REQUIRE(eventually([&] {
    return test::count_live_processes({"mxablate-fake-train", runs.string()}) == 2;
  }));
  p.signal(SIGKILL);
  const ProcessResult killed = p.wait();
  CHECK(killed.signal == SIGKILL);
  CHECK(eventually([&] { return test::count_live_processes({"mxablate-fake-train", runs.string()}) == 0; },
                   std::chrono::seconds(20)));
  const std::string db = (dir.path() / "mxablate.db").string();
  const auto standby_runs = query_rows(db, "SELECT run_id, status, attempts, run_dir FROM runs "
                                           "WHERE attempts = 0");
  REQUIRE(standby_runs.size() == 1);
  CHECK(standby_runs[0][1] == "pending");
  std::error_code ec;
  CHECK(fs::file_size(fs::path(standby_runs[0][3]) / "events.jsonl", ec) ==
        static_cast<uintmax_t>(-1));

  const ProcessResult again = run_process(args, dir.path(), {{"MXABLATE_FAKE_STEP_MS", "5"}});
  INFO(again.err);
  CHECK(again.code() == 0);
  CHECK(query_rows(db, "SELECT COUNT(*) FROM runs WHERE status = 'budget_exhausted'")[0][0] == "2");
  CHECK(query_rows(db, "SELECT COUNT(*), COUNT(DISTINCT run_id || '/' || step) FROM evals") ==
        std::vector<std::vector<std::string>>{{"10", "10"}});
  CHECK(query_rows(db, "SELECT COUNT(*), COUNT(DISTINCT run_id || '/' || step) FROM train_steps") ==
        std::vector<std::vector<std::string>>{{"40", "40"}});
  CHECK(query_rows(db, "SELECT attempts FROM runs WHERE run_id = '" + standby_runs[0][0] + "'")[0][0] ==
        "1");
}

TEST_CASE("mxablate run --no-prestart, and status prints each slot's busy fraction and each run's") {
  TempDir dir;
  const fs::path recipe = dir.path() / "busy.yaml";
  write_file(recipe, fake_recipe("busy", kSteps, 4, 5, "[1, 2]"));
  const auto args = [&](const std::string& db, bool prestart) {
    std::vector<std::string> a{kMxablate.string(), "run", recipe.string(), "--trainer",
                               kFakeTrainer.string(), "--cpu", "2", "--poll-ms", "20",
                               "--progress", "plain", "--db", db};
    if (!prestart) a.push_back("--no-prestart");
    return a;
  };
  const std::map<std::string, std::string> env{{"MXABLATE_FAKE_STEP_MS", "10"},
                                               {"MXABLATE_FAKE_EVAL_MS", "20"},
                                               {"MXABLATE_FAKE_STARTUP_MS", "100"}};
  const std::string off = (dir.path() / "off.db").string(), on = (dir.path() / "on.db").string();
  ProcessResult r = run_process(args(off, false), dir.path(), env);
  INFO(r.err);
  REQUIRE(r.code() == 0);
  CHECK(!contains(r.err, "prestarted"));
  CHECK(query_rows(off, "SELECT COUNT(*) FROM attempts WHERE prestarted = 1")[0][0] == "0");
  r = run_process(args(on, true), dir.path(), env);
  REQUIRE(r.code() == 0);
  CHECK(contains(r.err, "prestarted "));
  CHECK(contains(r.err, "released "));
  CHECK(query_rows(on, "SELECT COUNT(*) FROM attempts WHERE prestarted = 1")[0][0] == "2");
  // --no-prestart is for the local executor.
  auto slurm = args(off, false);
  slurm.insert(slurm.end(), {"--executor", "slurm"});
  const ProcessResult refused = run_process(slurm, dir.path());
  CHECK(refused.code() == 2);
  CHECK(contains(refused.err, "--no-prestart are for the local executor"));

  // status: per slot, train + eval + checkpoint over the union of the attempts' spans; per run,
  // its own.
  const ProcessResult s = run_process({kMxablate.string(), "status", "--db", on}, dir.path());
  REQUIRE(s.code() == 0);
  const auto rows = query_rows(on, "SELECT slot, launched_at, ended_at, train_s + eval_s + "
                                   "checkpoint_s, run_id, ended_at - launched_at, train_s, eval_s, "
                                   "checkpoint_s, setup_s, prestarted, standby_s FROM attempts");
  std::vector<std::pair<double, double>> spans;
  std::map<std::string, std::vector<std::pair<double, double>>> slot_spans;
  std::map<std::string, double> busy;
  std::map<std::string, std::map<std::string, double>> parts;  // slot → column → seconds
  for (const auto& row : rows) {
    spans.emplace_back(std::stod(row[1]), std::stod(row[2]));
    slot_spans[row[0]].emplace_back(std::stod(row[1]), std::stod(row[2]));
    busy[row[0]] += std::stod(row[3]);
    CHECK(std::stod(row[3]) > 0.2);  // 20 steps of 10 ms and 5 evaluations of 20 ms at least
    parts[row[0]]["train"] += std::stod(row[6]);
    parts[row[0]]["eval"] += std::stod(row[7]);
    parts[row[0]]["checkpoint"] += std::stod(row[8]);
    const bool prestarted = row[10] == "1";
    // Setup the slot waited for counts at most what the attempt's span leaves (the trainer's
    // clock starts at its exec, a moment before the attempt is recorded).
    if (prestarted) parts[row[0]]["overlapped setup"] += std::stod(row[9]);
    else parts[row[0]]["setup"] += std::min(std::stod(row[9]), std::stod(row[5]) - std::stod(row[3]));
    if (prestarted) parts[row[0]]["standby wait"] += std::stod(row[11]);
  }
  REQUIRE(busy.size() == 2);
  const std::regex line(R"(  busy: cpu0 ([0-9.]+)%, cpu1 ([0-9.]+)%; all slots ([0-9.]+)% of )");
  std::smatch m;
  INFO(s.out);
  REQUIRE(std::regex_search(s.out, m, line));
  const auto union_of = [](std::vector<std::pair<double, double>> s) {
    std::sort(s.begin(), s.end());
    double length = 0, reached = 0;
    for (const auto& [from, to] : s) {
      length += std::max(0.0, to - std::max(from, reached));
      reached = std::max(reached, to);
    }
    return length;
  };
  const double wall = union_of(spans);
  // A slot's runs overlap where one took the slot at the last one's run_end, during that
  // trainer's teardown: its setup is at most what the union of its spans leaves after its busy
  // time (a loaded machine's teardown once made its shares add up to 101.1 %).
  for (auto& [slot, p] : parts)
    p["setup"] = std::min(p["setup"], std::max(0.0, union_of(slot_spans[slot]) - busy[slot]));
  CHECK(std::stod(m[1]) == Approx(100 * busy["cpu0"] / wall).margin(0.06));
  CHECK(std::stod(m[2]) == Approx(100 * busy["cpu1"] / wall).margin(0.06));
  CHECK(std::stod(m[3]) == Approx(50 * (busy["cpu0"] + busy["cpu1"]) / wall).margin(0.06));
  // Where each slot's wall time went: train, eval, checkpoint, setup and idle add up to it; a
  // prestarted run's setup and its wait are shown apart (they overlapped the run before).
  REQUIRE(contains(s.out, "  time per slot, as shares of the "));
  for (const std::string slot : {"cpu0", "cpu1"}) {
    INFO(slot);
    const std::regex row("\n    " + slot +
                         " +([0-9.]+)% +([0-9.]+)% +([0-9.]+)% +([0-9.]+)% +([0-9.]+)% +([0-9.]+)% "
                         "+([0-9.]+)% +([0-9.]+)%\n");
    std::smatch t;
    REQUIRE(std::regex_search(s.out, t, row));
    const auto share = [&](int i) { return std::stod(t[i]); };
    const auto expect = [&](const char* part) { return 100 * parts[slot][part] / wall; };
    CHECK(share(1) == Approx(expect("train")).margin(0.06));
    CHECK(share(2) == Approx(expect("eval")).margin(0.06));
    CHECK(share(3) == Approx(expect("checkpoint")).margin(0.06));
    CHECK(share(4) == Approx(expect("setup")).margin(0.06));
    CHECK(share(1) + share(2) + share(3) + share(4) + share(5) == Approx(100).margin(0.2501));  // 5 roundings of 0.05
    CHECK(share(6) == Approx(100 * busy[slot] / wall).margin(0.06));
    CHECK(share(7) == Approx(expect("overlapped setup")).margin(0.06));
    CHECK(share(8) == Approx(expect("standby wait")).margin(0.06));
    CHECK(share(2) > 0);  // 5 evaluations of 20 ms per run
  }
  CHECK(contains(s.out, "\n    all "));
  // Each run's own busy fraction, in its row.
  for (const auto& row : rows) {
    const std::string pct = fmt::format("{:.1f}%", 100 * std::stod(row[3]) / std::stod(row[5]));
    const auto at = s.out.find(row[4].substr(0, 8));
    REQUIRE(at != std::string::npos);
    CHECK(contains(s.out.substr(at, s.out.find('\n', at) - at), pct));
  }

  // A store from before the timings (schema 4), read as it is: no busy line, no figures.
  {
    results::Database db(off, results::Database::Mode::kReadWrite);
    for (const char* c : {"prestarted", "setup_s", "standby_s", "train_s", "eval_s", "checkpoint_s"})
      db.exec(std::string("ALTER TABLE attempts DROP COLUMN ") + c, "test");
    db.exec("PRAGMA user_version = 4", "test");
  }
  const ProcessResult old = run_process({kMxablate.string(), "status", "--db", off}, dir.path());
  INFO(old.err);
  REQUIRE(old.code() == 0);
  CHECK_FALSE(contains(old.out, "\n  busy: "));
  CHECK_FALSE(contains(old.out, "time per slot"));
  CHECK(contains(s.out, "\n  busy: "));
  CHECK(contains(old.out, "budget_exhausted"));
}

namespace {

// Starts the fake trainer in `dir` as a standby holding the other end of `fds[1]`.
std::unique_ptr<bp::child> start_standby(const fs::path& dir, int fd) {
  bp::environment env = boost::this_process::environment();
  env[contract::kStandbyFdEnv] = std::to_string(fd);
  env["MXABLATE_FAKE_STEP_MS"] = "1";
  return std::make_unique<bp::child>(
      kFakeTrainer.string(), bp::args({"--run-dir", dir.string()}), env, bp::std_in < bp::null,
      bp::std_out > (dir / "out.txt").string(), bp::std_err > (dir / "err.txt").string(),
      bp::extend::on_exec_setup([fd](auto&) { ::fcntl(fd, F_SETFD, 0); }));
}

int wait_exit(bp::child& c) {
  std::error_code ec;
  for (int i = 0; i < 3000 && c.running(ec); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  c.wait(ec);
  return c.exit_code();
}

}  // namespace

TEST_CASE("the standby protocol at the trainer's end: end of file exits without writing, the go "
          "byte trains, a bad descriptor is refused") {
  SweepFixture f(fake_recipe("protocol", kSteps, 4, 5, "[1]"));
  const fs::path dir = f.dir.path() / "run";
  fs::create_directories(dir);
  contract::write_run_config((dir / "config.json").string(), f.plan.runs[0].config);
  {
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
    auto c = start_standby(dir, fds[1]);
    ::close(fds[1]);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ::close(fds[0]);  // what the orchestrator's death does
    CHECK(wait_exit(*c) == 4);
    CHECK(!fs::exists(dir / "events.jsonl"));
    CHECK(contains(read_file(dir / "err.txt"), contract::abandoned_message()));
  }
  {
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
    auto c = start_standby(dir, fds[1]);
    ::close(fds[1]);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    REQUIRE(::write(fds[0], &contract::kStandbyGo, 1) == 1);
    CHECK(wait_exit(*c) == 0);
    ::close(fds[0]);
    const auto events = contract::read_effective_events((dir / "events.jsonl").string());
    REQUIRE(events.size() > 2);
    CHECK(events.front()["prestarted"] == true);
    CHECK(events.back()["kind"] == "run_end");
    // From its start to the go: its setup, then the wait (the process-start clock ticks 10 ms).
    const json& end = events.back();
    CHECK(end["standby_s"].get<double>() > 0);
    CHECK(end["setup_s"].get<double>() + end["standby_s"].get<double>() >= 0.28);
  }
  for (const std::string value : {"abc", "1", "999", "7x"}) {
    INFO(value);
    const ProcessResult r = run_process({kFakeTrainer.string(), "--run-dir", dir.string()},
                                        f.dir.path(), {{contract::kStandbyFdEnv, value}});
    CHECK(r.code() == 2);
    CHECK(contains(r.err, std::string(contract::kStandbyFdEnv) + ": "));
  }
}

TEST_CASE("a slot passes to its standby at run_end only where the memory plan says both runs fit "
          "the slot at once, otherwise at the finishing trainer's exit") {
  const auto spec = [](const std::string& id, contract::Device device) {
    RunSpec r;
    r.run_id = id;
    r.config.device = device;
    return r;
  };
  const RunSpec cpu_a = spec("ca", contract::Device::kCPU), cpu_b = spec("cb", contract::Device::kCPU);
  const RunSpec gpu_a = spec("ga", contract::Device::kCUDA), gpu_b = spec("gb", contract::Device::kCUDA);
  // Nothing known: CPU runs hold no device memory; a GPU run waits for the exit.
  const HandoverRule unknown;
  CHECK(unknown.when(cpu_a, cpu_b) == Handover::kAtRunEnd);
  CHECK(unknown.when(gpu_a, gpu_b) == Handover::kAtExit);
  CHECK(unknown.when(cpu_a, gpu_b) == Handover::kAtExit);
  HandoverRule rule;
  rule.slot_bytes = 10;
  rule.peak_bytes = {{"ga", 4}, {"gb", 6}};
  CHECK(rule.when(gpu_a, gpu_b) == Handover::kAtRunEnd);  // 4 + 6 fit 10
  rule.slot_bytes = 9;
  CHECK(rule.when(gpu_a, gpu_b) == Handover::kAtExit);
  rule.slot_bytes = 10;
  rule.peak_bytes.erase("gb");  // its dataset's vocabulary unknown: no prediction
  CHECK(rule.when(gpu_a, gpu_b) == Handover::kAtExit);

  // From a plan: every CUDA run's predicted peak, the GPU's memory shared by its slots.
  SweepFixture f(fake_recipe("rule", kSteps, 4, 5, "[1]"));
  Plan plan = f.plan;
  for (RunSpec& r : plan.runs) r.config.device = contract::Device::kCUDA;
  const DatasetVocabularies vocab{{plan.runs[0].config.data.dataset, 32000}};
  const HandoverRule made = make_handover_rule(plan, vocab, int64_t{80} << 30, 2);
  CHECK(made.slot_bytes == (int64_t{40} << 30));
  REQUIRE(made.peak_bytes.size() == plan.runs.size());
  for (const auto& [id, bytes] : made.peak_bytes) CHECK(bytes > 0);
  CHECK(made.when(plan.runs[0], plan.runs[1]) == Handover::kAtRunEnd);  // smoke models: tiny
  CHECK(make_handover_rule(plan, vocab, std::nullopt, 1).when(plan.runs[0], plan.runs[1]) ==
        Handover::kAtExit);
  CHECK(make_handover_rule(plan, {}, int64_t{80} << 30, 1).peak_bytes.empty());
  CHECK(make_handover_rule(f.plan, vocab, int64_t{80} << 30, 1).peak_bytes.empty());  // CPU runs

  // An auto-recompute run peaks as the trainer will run it: auto resolved on the slot's share
  // (none of these small blocks recomputed), not at auto's least (every block).
  for (RunSpec& r : plan.runs) r.config.train.activation_checkpointing = {contract::Recompute::Mode::kAuto, 0};
  const HandoverRule with_auto = make_handover_rule(plan, vocab, int64_t{80} << 30, 2);
  contract::RunConfig none = plan.runs[0].config;
  none.train.activation_checkpointing = {};
  CHECK(with_auto.peak_bytes.at(plan.runs[0].run_id) == trainer::plan_memory(none, 32000).total());
  CHECK(with_auto.peak_bytes.at(plan.runs[0].run_id) > trainer::plan_memory(plan.runs[0].config, 32000).total());
}
