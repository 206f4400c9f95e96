// Faults around the orchestrator process itself: Ctrl-C / SIGTERM, SIGKILL mid-sweep, readers in
// a loop while it writes, a second orchestrator on the same sweep.
#include <fstream>
#include <random>
#include <atomic>
#include <set>
#include <thread>

#include "catch.h"
#include "process_util.h"
#include "mxablate/contract/event_log.h"
#include "mxablate/results/sqlite_db.h"
#include "test_util.h"

using namespace mxablate;
using namespace mxablate::testing;
namespace fs = std::filesystem;

namespace {

constexpr int kSteps = 30;
constexpr int kEvals = 10;  // every 3 steps

struct SweepCli {
  TempDir dir;
  fs::path recipe = dir.path() / "sweep.yaml";
  std::map<std::string, std::string> env{{"MXABLATE_FAKE_STEP_MS", "15"}};
  explicit SweepCli(const std::string& name, const std::string& seeds = "[1, 2, 3]") {
    write_file(recipe, fake_recipe(name, kSteps, 3, 5, seeds));
  }
  std::vector<std::string> args() const {
    return {kMxablate.string(), "run", recipe.string(), "--trainer", kFakeTrainer.string(),
            "--cpu", "2", "--poll-ms", "20", "--progress", "plain", "--grace", "20s"};
  }
  std::unique_ptr<Process> start() { return std::make_unique<Process>(args(), dir.path(), env); }
  ProcessResult run_to_end() { return run_process(args(), dir.path(), env); }

  std::string db() const { return (dir.path() / "mxablate.db").string(); }
  int64_t scalar(const std::string& sql) const {
    results::Database d(db(), results::Database::Mode::kReadOnly);
    results::Statement st(d, sql);
    st.step();
    return st.get_int(0);
  }
  // Counts, tolerating a database that does not exist yet.
  int64_t count_or_zero(const std::string& sql) const {
    if (!fs::exists(db())) return 0;
    try {
      return scalar(sql);
    } catch (const std::exception&) {
      return 0;
    }
  }
  void check_every_run_complete_once() const {
    CHECK(scalar("SELECT COUNT(*) FROM runs WHERE status = 'budget_exhausted'") == 6);
    CHECK(scalar("SELECT COUNT(*) FROM (SELECT run_id FROM evals GROUP BY run_id HAVING "
                 "COUNT(*) = " + std::to_string(kEvals) + " AND COUNT(DISTINCT step) = " +
                 std::to_string(kEvals) + ")") == 6);
    CHECK(scalar("SELECT COUNT(*) FROM train_steps") == 6 * kSteps);
  }
  // Trainer processes still running for this sweep's run directories.
  int live_trainers() const {
    return test::count_live_processes({"mxablate-fake-train", (dir.path() / "runs").string()});
  }
};

}  // namespace

TEST_CASE("Ctrl-C / SIGTERM: trainers checkpoint and stop, the state is recorded, re-running finishes") {
  const int sig = GENERATE(SIGINT, SIGTERM);
  INFO("signal " << sig);
  SweepCli s("stop-" + std::to_string(sig));
  auto p = s.start();
  REQUIRE(eventually([&] { return s.count_or_zero("SELECT COUNT(*) FROM evals") >= 2; }));
  p->signal(sig);
  const ProcessResult r = p->wait();
  INFO(r.err);
  CHECK(r.code() == 128 + sig);
  CHECK(contains(r.err, "stopping: no new launches; asking 2 running trainer(s) to checkpoint"));
  CHECK(contains(r.err, sig == SIGINT ? "mxablate: stopped by Ctrl-C (SIGINT); run the same "
                                        "command again to continue"
                                      : "mxablate: stopped by SIGTERM; run the same command "
                                        "again to continue"));
  CHECK(s.scalar("SELECT COUNT(*) FROM runs WHERE status = 'interrupted'") == 2);
  CHECK(s.scalar("SELECT COUNT(*) FROM runs WHERE status = 'running'") == 0);
  CHECK(s.scalar("SELECT COUNT(*) FROM attempts WHERE ended_at IS NULL") == 0);
  // The two runs prestarted on the busy slots were stopped too, before training: still pending.
  CHECK(contains(r.err, "its standby trainer ended"));
  CHECK(s.scalar("SELECT COUNT(*) FROM runs WHERE status = 'pending' AND attempts = 0") == 4);
  CHECK(s.live_trainers() == 0);

  const ProcessResult again = s.run_to_end();
  INFO(again.err);
  CHECK(again.code() == 0);
  CHECK(s.scalar("SELECT COUNT(*) FROM attempts WHERE resumed = 1") == 2);
  s.check_every_run_complete_once();
}

TEST_CASE("SIGKILL of the orchestrator: its trainers stop, and the same command finishes the "
          "sweep with nothing run twice and nothing lost") {
  SweepCli s("killed");
  auto p = s.start();
  // Kill it once at least one run has finished and others are running.
  REQUIRE(eventually([&] {
    return s.count_or_zero("SELECT COUNT(*) FROM runs WHERE status = 'budget_exhausted'") >= 1 &&
           s.count_or_zero("SELECT COUNT(*) FROM runs WHERE status = 'running'") >= 1;
  }));
  p->signal(SIGKILL);
  CHECK(p->wait().signal == SIGKILL);
  // The trainers got their parent-death signal (SIGTERM): they checkpoint and exit by themselves.
  CHECK(eventually([&] { return s.live_trainers() == 0; }, std::chrono::seconds(10)));
  std::map<std::string, int64_t> finished_before;
  {
    results::Database d(s.db(), results::Database::Mode::kReadOnly);
    results::Statement st(d, "SELECT run_id, attempts FROM runs WHERE status = 'budget_exhausted'");
    while (st.step()) finished_before[st.get_text(0)] = st.get_int(1);
  }
  const int64_t evals_before = s.scalar("SELECT COUNT(*) FROM evals");
  REQUIRE_FALSE(finished_before.empty());
  CHECK(s.scalar("SELECT COUNT(*) FROM attempts WHERE ended_at IS NULL") >= 1);

  const ProcessResult again = s.run_to_end();
  INFO(again.err);
  CHECK(again.code() == 0);
  CHECK(contains(again.err, "recovered "));
  // Finished runs were not run again.
  for (const auto& [run_id, attempts] : finished_before)
    CHECK(s.scalar("SELECT attempts FROM runs WHERE run_id = '" + run_id + "'") == attempts);
  CHECK(s.scalar("SELECT COUNT(*) FROM evals") >= evals_before);  // nothing ingested was lost
  CHECK(s.scalar("SELECT COUNT(*) FROM attempts WHERE ended_at IS NULL") == 0);
  s.check_every_run_complete_once();
}

TEST_CASE("status and query in a loop while a sweep writes never see 'database is locked'") {
  SweepCli s("readers");  // about 1.5 s of writing, with 15 ms steps
  auto p = s.start();
  REQUIRE(eventually([&] { return fs::exists(s.db()); }));
  int loops = 0;
  std::vector<std::string> failures;
  while (p->running() || loops < 10) {
    for (const auto& args : std::vector<std::vector<std::string>>{
             {kMxablate.string(), "status", "--db", s.db()},
             {kMxablate.string(), "query", "--db", s.db(),
              "SELECT COUNT(*) FROM evals; SELECT * FROM arm_summary"}}) {
      const ProcessResult r = run_process(args, s.dir.path());
      if (r.code() != 0 || contains(r.err, "locked") || contains(r.err, "busy"))
        failures.push_back(r.err);
    }
    ++loops;
  }
  const ProcessResult r = p->wait();
  CHECK(r.code() == 0);
  INFO((failures.empty() ? std::string() : failures.front()));
  CHECK(failures.empty());
  CHECK(loops >= 10);
  s.check_every_run_complete_once();
}

TEST_CASE("a second orchestrator on the same sweep is refused while the first runs") {
  SweepCli s("twice");
  auto first = s.start();
  REQUIRE(eventually([&] { return s.count_or_zero("SELECT COUNT(*) FROM attempts") >= 1; }));
  const ProcessResult second = run_process(s.args(), s.dir.path(), s.env);
  CHECK(second.code() == 1);
  // The database's writer lock refuses it before the sweep's own lock is reached.
  CHECK(contains(second.err, "mxablate: " + fs::canonical(s.db()).string() +
                                 ": another mxablate (pid " + std::to_string(first->pid()) +
                                 " on "));
  CHECK(first->wait().code() == 0);
  s.check_every_run_complete_once();
}

TEST_CASE("two orchestrators on one database from two directories: one writer, nothing run "
          "twice, nothing lost when both are killed at random moments") {
  // The same recipe started from two directories: the default runs directory (relative) differs,
  // so only the database ties them together.
  SweepCli s("two-dirs");
  const fs::path a = s.dir.path() / "a", b = s.dir.path() / "b";
  fs::create_directories(a);
  fs::create_directories(b);
  const std::string db = (s.dir.path() / "shared.db").string();
  std::vector<std::string> args = s.args();
  args.insert(args.end(), {"--db", db});
  std::map<std::string, std::string> slow = s.env;
  slow["MXABLATE_FAKE_STEP_MS"] = "40";  // ~1.2 s per run: kills land mid-run
  const auto scalar = [&](const std::string& sql) {
    results::Database d(db, results::Database::Mode::kReadOnly);
    results::Statement st(d, sql);
    st.step();
    return st.get_int(0);
  };
  const auto trainers_gone = [&] {
    return test::count_live_processes({"mxablate-fake-train", s.dir.path().string()}) == 0;
  };

  // While one runs, the other is refused with a message naming the database and the pid.
  {
    auto first = std::make_unique<Process>(args, a, slow);
    REQUIRE(eventually([&] { return fs::exists(db) && scalar("SELECT COUNT(*) FROM attempts") >= 1; }));
    const ProcessResult second = run_process(args, b, slow);
    CHECK(second.code() == 1);
    CHECK(second.err == "mxablate: " + fs::canonical(db).string() + ": another mxablate (pid " +
                            std::to_string(first->pid()) + " on " + [] {
                              char h[256] = {};
                              ::gethostname(h, sizeof h - 1);
                              return std::string(h);
                            }() + ") is writing to this results database; one database has one "
                            "writer at a time — wait for it to finish or stop it (status, query, "
                            "table and report can read it meanwhile)\n");
    CHECK(fs::is_empty(b / "runs" / "two-dirs"));  // it launched nothing
    first->signal(SIGKILL);
    first->wait();
    REQUIRE(eventually(trainers_gone, std::chrono::seconds(20)));
  }

  // Both started and killed at random moments, in either order.
  std::mt19937 rng(12345);
  std::uniform_int_distribution<int> ms(50, 450);
  for (int round = 0; round < 4; ++round) {
    INFO("round " << round);
    const fs::path first_dir = round % 2 ? b : a, second_dir = round % 2 ? a : b;
    auto p1 = std::make_unique<Process>(args, first_dir, slow);
    std::this_thread::sleep_for(std::chrono::milliseconds(ms(rng)));
    auto p2 = std::make_unique<Process>(args, second_dir, slow);
    std::this_thread::sleep_for(std::chrono::milliseconds(ms(rng)));
    p1->signal(SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(ms(rng)));
    p2->signal(SIGKILL);
    for (auto* p : {p1.get(), p2.get()}) {
      const ProcessResult r = p->wait();
      INFO(r.err);
      // Killed, or refused because the other one held the database.
      CHECK((r.signal == SIGKILL || (r.code() == 1 && contains(r.err, "is writing to this results database"))));
    }
    REQUIRE(eventually(trainers_gone, std::chrono::seconds(20)));
  }

  const ProcessResult last = run_process(args, a, s.env);
  INFO(last.err);
  CHECK(last.code() == 0);
  CHECK(scalar("SELECT COUNT(*) FROM runs WHERE status = 'budget_exhausted'") == 6);
  // Nothing launched after a run had its result.
  CHECK(scalar("SELECT COUNT(*) FROM attempts a JOIN attempts f USING (run_id) WHERE f.outcome "
               "IN ('converged', 'budget_exhausted', 'diverged') AND a.attempt > f.attempt") == 0);
  // Each run reached its result once (in one of the two runs directories), and the database
  // holds exactly the rows of the log it was last read from: nothing lost, nothing extra.
  results::Database d(db, results::Database::Mode::kReadOnly);
  results::Statement runs(d, "SELECT run_id FROM runs");
  int checked = 0;
  while (runs.step()) {
    const std::string run_id = runs.get_text(0);
    INFO(run_id);
    std::set<int64_t> in_db;
    for (const char* table : {"evals", "train_steps", "quant_stats", "events"}) {
      results::Statement st(d, std::string("SELECT seq FROM ") + table + " WHERE run_id = ?1");
      st.bind(1, run_id);
      while (st.step()) in_db.insert(st.get_int(0));
    }
    int results_in_logs = 0, matching_logs = 0;
    for (const fs::path& dir : {a, b}) {
      const fs::path log = dir / "runs" / "two-dirs" / run_id / "events.jsonl";
      if (!fs::exists(log)) continue;
      std::set<int64_t> in_log;
      bool finished = false;
      for (const auto& e : contract::read_effective_events(log.string())) {
        in_log.insert(e["seq"].get<int64_t>());
        if (e["kind"] == "run_end" && e["status"] == "budget_exhausted") finished = true;
      }
      results_in_logs += finished ? 1 : 0;
      if (finished && in_log == in_db) ++matching_logs;
    }
    CHECK(results_in_logs == 1);
    CHECK(matching_logs == 1);
    ++checked;
  }
  CHECK(checked == 6);
}
