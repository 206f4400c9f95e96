// Faults around the orchestrator process itself: Ctrl-C / SIGTERM, SIGKILL mid-sweep, readers in
// a loop while it writes, a second orchestrator on the same sweep.
#include <atomic>
#include <set>
#include <thread>

#include "catch.h"
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
    int n = 0;
    for (const auto& p : fs::directory_iterator("/proc")) {
      std::ifstream cmd(p.path() / "cmdline");
      std::string args((std::istreambuf_iterator<char>(cmd)), {});
      std::ifstream stat(p.path() / "stat");
      std::string st;
      std::getline(stat, st);
      const size_t paren = st.rfind(')');
      const bool zombie = paren != std::string::npos && paren + 2 < st.size() && st[paren + 2] == 'Z';
      if (!zombie && contains(args, "mxablate-fake-train") &&
          contains(args, (dir.path() / "runs").string()))
        ++n;
    }
    return n;
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
  CHECK(contains(second.err, "mxablate: another mxablate (pid " + std::to_string(first->pid()) +
                                 ") is running this sweep"));
  CHECK(first->wait().code() == 0);
  s.check_every_run_complete_once();
}
