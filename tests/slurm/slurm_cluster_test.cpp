// `mxablate run --executor slurm` against a real one-node Slurm cluster (slurm_cluster.h): array
// submission and the %K throttle, a task scancelled mid-run and resumed, a task past its time
// limit resumed, a task whose node failed resumed, detaching and re-attaching across
// orchestrator restarts (Ctrl-C and SIGKILL),
// `mxablate cancel`, a run of 2 ranks (its own array, twice the CPUs), and a sweep of the real
// CPU-smoke trainer when it is built. Where Slurm
// cannot start, the whole binary reports "skipped" (exit code 77) with the reason.
//
// The time-limit case needs more than a minute (Slurm's limits are whole minutes, enforced every
// 30 s), so main() starts its sweep first and the other cases run while it waits.
#define CATCH_CONFIG_RUNNER
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fmt/format.h>
#include <fstream>
#include <future>
#include <iostream>
#include <set>

#include "catch.h"
#include "mxablate/orchestrator/command_runner.h"
#include "mxablate/orchestrator/slurm_array_script.h"
#include "mxablate/orchestrator/slurm_client.h"
#include "mxablate/orchestrator/slurm_sweep_files.h"
#include "slurm_cluster.h"
#include "slurm_test_support.h"

using namespace mxablate::slurm_test;
using mxablate::orchestrator::slurm_job_name;
using mxablate::orchestrator::SlurmSweepFiles;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// One sweep's files and the command lines that drive it.
struct Sweep {
  std::string name;
  ScratchDir dir;
  fs::path recipe, db, runs;

  Sweep(const std::string& sweep_name, const std::string& recipe_text)
      : name(sweep_name), dir("slurm-it-" + sweep_name) {
    recipe = dir.path / "recipe.yaml";
    db = dir.path / "results.db";
    runs = dir.path / "runs";
    std::ofstream(recipe) << recipe_text;
  }
  fs::path sweep_dir() const { return runs / name; }
  std::string job_name() const { return slurm_job_name(name, sweep_dir()); }

  std::vector<std::string> slurm_args(std::vector<std::string> extra = {}) const {
    std::vector<std::string> a{"run", recipe.string(), "--executor", "slurm", "--db", db.string(),
                               "--runs-dir", runs.string(), "--trainer", FAKE_TRAINER_BIN,
                               "--slurm-poll", "300ms", "--poll-ms", "100", "--progress",
                               "plain"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }

  std::vector<std::string> run_ids() const {
    std::vector<std::string> ids;
    for (const auto& row : query(db, "SELECT run_id FROM runs ORDER BY plan_index"))
      ids.push_back(row[0].get<std::string>());
    return ids;
  }

  std::vector<std::vector<json>> attempts(const std::string& run_id) const {
    return query(db, fmt::format("SELECT attempt, executor, executor_ref, resumed, outcome, "
                                 "COALESCE(reason, '') FROM attempts WHERE run_id = '{}' "
                                 "ORDER BY attempt",
                                 run_id));
  }

  std::string status(const std::string& run_id) const {
    return query(db, fmt::format("SELECT status FROM runs WHERE run_id = '{}'", run_id))[0][0]
        .get<std::string>();
  }

  // (step, val_loss) of every evaluation on the run's surviving timeline.
  std::vector<std::pair<int64_t, double>> evals(const std::string& run_id,
                                                const fs::path& database) const {
    std::vector<std::pair<int64_t, double>> out;
    for (const auto& row : query(database, fmt::format("SELECT step, val_loss FROM evals WHERE "
                                                       "run_id = '{}' ORDER BY step",
                                                       run_id)))
      out.emplace_back(row[0].get<int64_t>(), row[1].get<double>());
    return out;
  }

  // The same sweep without Slurm, uninterrupted and at full speed: what every run must end as.
  fs::path reference() const {
    const fs::path ref_db = dir.path / "reference.db";
    const CommandResult r = run_mxablate(
        {"run", recipe.string(), "--db", ref_db.string(), "--runs-dir",
         (dir.path / "reference-runs").string(), "--trainer", FAKE_TRAINER_BIN, "--cpu", "2",
         "--progress", "none"},
        {{"MXABLATE_FAKE_STEP_MS", "0"}});
    REQUIRE(r.exit_code == 0);
    return ref_db;
  }

  bool has_event(const std::string& run_id, const std::string& kind, int64_t min_step = 0) const {
    for (const json& e : read_events(sweep_dir() / run_id))
      if (e.value("kind", "") == kind && e.value("step", int64_t{0}) >= min_step) return true;
    return false;
  }
};

// The time-limit sweep: one run of ~100 s of (sleeping) work under --time 1 (one minute).
struct TimeLimitSweep {
  Sweep sweep{"timelimit", fake_recipe("timelimit", 400, {"bf16"}, {1}, 20)};
  Clock::time_point started = Clock::now();
  std::unique_ptr<Mxablate> process;
  TimeLimitSweep() {
    process = std::make_unique<Mxablate>(sweep.slurm_args({"--time", "1"}),
                                         std::map<std::string, std::string>{
                                             {"MXABLATE_FAKE_STEP_MS", "250"}},
                                         sweep.dir.path / "mxablate.out");
  }
};

bool time_limit_sweep_started = false;

TimeLimitSweep& time_limit_sweep() {
  time_limit_sweep_started = true;
  static TimeLimitSweep s;
  return s;
}

}  // namespace

TEST_CASE("a sweep is one job array whose %K throttle Slurm enforces", "[slurm]") {
  Sweep s("arrays", fake_recipe("arrays", 30, {"bf16", "FDW"}, {1, 2}));
  const auto t0 = Clock::now();
  Mxablate run(s.slurm_args({"--max-parallel", "2", "--sbatch-arg=--comment=mxablate-test",
                             "--sbatch-arg", "--nice=10"}),
               {{"MXABLATE_FAKE_STEP_MS", "100"}}, s.dir.path / "mxablate.out");
  std::future<QueueObservation> watcher = std::async(std::launch::async, [&] {
    return watch_queue(s.job_name(), [&] { return !run.running(); });
  });
  const auto code = run.wait(120s);
  const QueueObservation seen = watcher.get();
  INFO(run.output());
  REQUIRE(code == 0);
  record_timing("arrays: 4 runs of 3 s, %2, submission to exit", seconds_since(t0));

  const auto ids = s.run_ids();
  REQUIRE(ids.size() == 4);
  std::set<std::string> jobs;
  for (size_t i = 0; i < ids.size(); ++i) {
    CHECK(s.status(ids[i]) == "budget_exhausted");
    const auto a = s.attempts(ids[i]);
    REQUIRE(a.size() == 1);
    CHECK(a[0][1] == "slurm");
    const auto ref = mxablate::orchestrator::parse_slurm_task_ref(a[0][2].get<std::string>());
    REQUIRE(ref);
    jobs.insert(ref->job_id);
    CHECK(ref->task == static_cast<int>(i));  // one task per run, in plan order
  }
  CHECK(jobs.size() == 1);  // one array for the whole sweep

  // The script is in the sweep directory, readable and re-submittable as it is.
  const SlurmSweepFiles files(s.sweep_dir());
  const std::string script = read_file(files.script_path(1));
  CHECK_THAT(script, has_text("#SBATCH --array=0-3%2\n"));
  CHECK_THAT(script, has_text("#SBATCH --job-name=" + s.job_name() + "\n"));
  CHECK_THAT(script, has_text("#SBATCH --comment=mxablate-test\n#SBATCH --nice=10\n"));
  CHECK(files.read_submissions().size() == 1);

  // Throttled by Slurm: never more than 2 running, and Slurm said why the others waited.
  CHECK(seen.polls > 5);
  CHECK(seen.max_running <= 2);
  CHECK(seen.saw_throttled);
  // The trainers' own clocks agree: at most two runs overlapped, and two did.
  std::vector<std::pair<double, int>> edges;
  for (const std::string& id : ids) {
    double start = 0, end = 0;
    for (const json& e : read_events(s.sweep_dir() / id)) {
      if (e["kind"] == "run_start") start = e["time"].get<double>();
      if (e["kind"] == "run_end") end = e["time"].get<double>();
    }
    REQUIRE(start > 0);
    REQUIRE(end > start);
    edges.emplace_back(start, +1);
    edges.emplace_back(end, -1);
  }
  std::sort(edges.begin(), edges.end());
  int overlap = 0, max_overlap = 0;
  for (const auto& [t, d] : edges) max_overlap = std::max(max_overlap, overlap += d);
  CHECK(max_overlap == 2);

  // Submission to the first event of the first run, through Slurm.
  const auto first = query(s.db,
                           "SELECT MIN(e.time) - MIN(a.launched_at) FROM events e JOIN attempts a "
                           "USING (run_id) WHERE e.kind = 'run_start'");
  record_timing("arrays: submission to first trainer event", first[0][0].get<double>());

  // `mxablate status` names each run's Slurm task.
  const CommandResult st = run_mxablate({"status", "--db", s.db.string()});
  CHECK(st.exit_code == 0);
  CHECK_THAT(st.output, has_text(*jobs.begin() + "_3"));
  CHECK_THAT(st.output, has_text("slurm"));
}

TEST_CASE("a run of 2 ranks is one task, in an array of its own, with twice the CPUs", "[slurm]") {
  std::string text = fake_recipe("ranks", 10, {"bf16"}, {1});
  text.replace(text.find("grid:"), 0,
               "  W: {parallel: {data: 2}, train: {micro_batch_tokens: 1024}}\n");
  Sweep s("ranks", text);
  Mxablate run(s.slurm_args(), {{"MXABLATE_FAKE_STEP_MS", "20"}}, s.dir.path / "mxablate.out");
  const auto code = run.wait(120s);
  INFO(run.output());
  REQUIRE(code == 0);
  for (const std::string& id : s.run_ids()) CHECK(s.status(id) == "budget_exhausted");
  const SlurmSweepFiles files(s.sweep_dir());
  const auto subs = files.read_submissions();
  REQUIRE(subs.size() == 2);  // one array per rank count
  std::string one, two;
  for (const auto& sub : subs) {
    REQUIRE(sub.tasks.size() == 1);
    const std::string script = read_file(files.script_path(sub.number));
    (script.find("\nranks=2 ") != std::string::npos ? two : one) = script;
  }
  CHECK_THAT(two, has_text("#SBATCH --cpus-per-task=2\n"));
  CHECK_THAT(two, has_text("#SBATCH --ntasks=1\n"));
  CHECK_THAT(one, has_text("\nranks=1 "));
  CHECK(one.find("#SBATCH --cpus-per-task") == std::string::npos);
}

TEST_CASE("a task scancelled mid-run resumes from its checkpoint in a new job", "[slurm]") {
  Sweep s("scancel", fake_recipe("scancel", 60, {"bf16"}, {1}));
  const auto t0 = Clock::now();
  Mxablate run(s.slurm_args(), {{"MXABLATE_FAKE_STEP_MS", "100"}}, s.dir.path / "mxablate.out");
  std::string run_id;
  REQUIRE(wait_until(
      [&] {
        if (run_id.empty()) {
          try {
            const auto ids = s.run_ids();
            if (!ids.empty()) run_id = ids[0];
          } catch (const std::exception&) {  // the database is not there yet
          }
        }
        return !run_id.empty() && s.has_event(run_id, "checkpoint", 20);
      },
      60s));
  const std::string ref = s.attempts(run_id).at(0).at(2).get<std::string>();
  mxablate::orchestrator::make_slurm_command_client()->cancel({ref});  // scancel JOB_TASK
  const auto code = run.wait(120s);
  INFO(run.output());
  REQUIRE(code == 0);
  record_timing("scancel: 6 s run, cancelled at step 20+, resumed", seconds_since(t0));

  const auto a = s.attempts(run_id);
  REQUIRE(a.size() == 2);
  CHECK(a[0][2] == ref);
  CHECK(a[0][4] == "retry");
  CHECK_THAT(a[0][5].get<std::string>(), has_text("CANCELLED"));
  CHECK_THAT(a[0][5].get<std::string>(), has_text("exit code 4"));  // it checkpointed
  CHECK(a[1][3] == 1);                                                       // resumed
  CHECK(a[1][2].get<std::string>().substr(0, ref.find('_')) != ref.substr(0, ref.find('_')));
  CHECK(a[1][4] == "budget_exhausted");
  CHECK(s.status(run_id) == "budget_exhausted");
  // The resumed timeline is exactly the uninterrupted one.
  const auto reference = s.evals(run_id, s.reference());
  CHECK(reference.size() == 6);
  CHECK(s.evals(run_id, s.db) == reference);
  CHECK(SlurmSweepFiles(s.sweep_dir()).read_submissions().size() == 2);
}

TEST_CASE("stopping the orchestrator leaves the jobs running, re-running re-attaches to them",
          "[slurm]") {
  // 10 s runs: long enough that all four are still running through two restarts.
  Sweep s("reattach", fake_recipe("reattach", 100, {"bf16", "FDW"}, {1, 2}));
  const std::map<std::string, std::string> env{{"MXABLATE_FAKE_STEP_MS", "100"}};
  const auto t0 = Clock::now();
  std::vector<std::string> ids;
  {
    Mxablate first(s.slurm_args(), env, s.dir.path / "first.out");
    REQUIRE(wait_until(
        [&] {
          try {
            ids = s.run_ids();
          } catch (const std::exception&) {
            return false;
          }
          return ids.size() == 4 && std::all_of(ids.begin(), ids.end(), [&](const auto& id) {
                   return s.has_event(id, "run_start");
                 });
        },
        60s));
    first.signal(SIGINT);  // Ctrl-C: detach
    const auto code = first.wait(20s);
    INFO(first.output());
    REQUIRE(code == 128 + SIGINT);
    CHECK_THAT(first.output(), has_text("4 Slurm task(s) keep running"));
  }
  CHECK(live_tasks(s.job_name()) == 4);  // not cancelled
  for (const auto& id : ids) CHECK(s.status(id) == "running");
  {
    Mxablate second(s.slurm_args(), env, s.dir.path / "second.out");
    REQUIRE(wait_until([&] {
      const std::string out = second.output();
      size_t n = 0;
      for (size_t p = out.find("re-attached to"); p != std::string::npos;
           p = out.find("re-attached to", p + 1))
        ++n;
      return n == 4;
    }, 30s));
    std::this_thread::sleep_for(1s);
    second.signal(SIGKILL);  // a lost login session: no chance to say anything
    second.wait(10s);
  }
  CHECK(live_tasks(s.job_name()) > 0);
  // Running it locally now would train those runs a second time.
  const CommandResult local =
      run_mxablate({"run", s.recipe.string(), "--db", s.db.string(), "--runs-dir",
                    s.runs.string(), "--trainer", FAKE_TRAINER_BIN, "--progress", "none"});
  CHECK(local.exit_code == 2);
  CHECK_THAT(local.output, has_text("Slurm task(s) recorded as queued or running"));
  Mxablate third(s.slurm_args(), env, s.dir.path / "third.out");
  const auto code = third.wait(120s);
  INFO(third.output());
  REQUIRE(code == 0);
  record_timing("re-attach: detach, re-attach, SIGKILL, re-attach, finish", seconds_since(t0));

  CHECK(SlurmSweepFiles(s.sweep_dir()).read_submissions().size() == 1);  // never resubmitted
  const fs::path ref_db = s.reference();
  for (const auto& id : ids) {
    CHECK(s.status(id) == "budget_exhausted");
    const auto a = s.attempts(id);
    REQUIRE(a.size() == 1);  // the same attempt, across three orchestrators
    CHECK(a[0][4] == "budget_exhausted");
    CHECK(s.evals(id, s.db) == s.evals(id, ref_db));
  }
}

TEST_CASE("mxablate cancel stops a running sweep's jobs, which are recorded as interrupted and "
          "resume on the next run",
          "[slurm]") {
  Sweep s("cancel", fake_recipe("cancel", 300, {"bf16"}, {1, 2}));
  const auto t0 = Clock::now();
  Mxablate run(s.slurm_args(), {{"MXABLATE_FAKE_STEP_MS", "100"}}, s.dir.path / "mxablate.out");
  std::vector<std::string> ids;
  REQUIRE(wait_until(
      [&] {
        try {
          ids = s.run_ids();
        } catch (const std::exception&) {
          return false;
        }
        return ids.size() == 2 && s.has_event(ids[0], "checkpoint") &&
               s.has_event(ids[1], "checkpoint");
      },
      60s));
  const CommandResult cancel = run_mxablate({"cancel", "--db", s.db.string(), "--sweep", s.name});
  INFO(cancel.output);
  CHECK(cancel.exit_code == 0);
  CHECK_THAT(cancel.output, has_text("cancelled 2 Slurm task(s) (2 running, 0 queued)"));
  const auto code = run.wait(60s);
  INFO(run.output());
  REQUIRE(code == 1);
  CHECK_THAT(run.output(), has_text("the sweep was cancelled (mxablate cancel)"));
  record_timing("cancel: start, cancel 2 running tasks, orchestrator exit", seconds_since(t0));
  CHECK(live_tasks(s.job_name()) == 0);
  for (const auto& id : ids) {
    CHECK(s.status(id) == "interrupted");
    const auto a = s.attempts(id);
    REQUIRE(a.size() == 1);
    CHECK(a[0][4] == "interrupted");
    CHECK_THAT(a[0][5].get<std::string>(), has_text("stopped on request"));
  }
  CHECK(SlurmSweepFiles(s.sweep_dir()).read_cancels().size() == 1);
  const CommandResult again = run_mxablate({"cancel", "--db", s.db.string(), "--sweep", s.name});
  CHECK(again.exit_code == 0);
  CHECK_THAT(again.output, has_text("no Slurm jobs queued or running"));

  // Continuing: each run resumes from the checkpoint it wrote when Slurm stopped it.
  const CommandResult resumed = run_mxablate(s.slurm_args(), {{"MXABLATE_FAKE_STEP_MS", "0"}});
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  const fs::path ref_db = s.reference();
  for (const auto& id : ids) {
    CHECK(s.status(id) == "budget_exhausted");
    const auto a = s.attempts(id);
    REQUIRE(a.size() == 2);
    CHECK(a[1][3] == 1);
    CHECK(s.evals(id, s.db) == s.evals(id, ref_db));
  }
}

TEST_CASE("options that cannot work with Slurm are refused before anything is submitted",
          "[slurm]") {
  Sweep s("badopts", fake_recipe("badopts", 10, {"bf16"}, {1}));
  for (const auto& [extra, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--time", "2h"}, "--time: '2h' is not a Slurm time limit"},
           {{"--sbatch-arg=--array=0-3"}, "mxablate sets --array itself"},
           {{"--cpu", "2"}, "are for the local executor"},
           {{"--timeout", "1h"}, "are for the local executor"}}) {
    const CommandResult r = run_mxablate(s.slurm_args(extra));
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, has_text(message));
  }
  const CommandResult local = run_mxablate({"run", s.recipe.string(), "--max-parallel", "2",
                                            "--db", s.db.string(), "--trainer", FAKE_TRAINER_BIN});
  CHECK(local.exit_code == 2);
  CHECK_THAT(local.output, has_text("need --executor slurm"));
  CHECK_FALSE(fs::exists(s.sweep_dir() / "slurm"));
  // A partition Slurm does not have: sbatch's own refusal, in one line, and the run failed.
  const CommandResult bad = run_mxablate(s.slurm_args({"--partition", "nosuchpartition"}));
  CHECK(bad.exit_code == 1);
  CHECK_THAT(bad.output, has_text("sbatch failed"));
  CHECK_THAT(bad.output, has_text("partition"));
}

// The real trainer needs a prepared dataset: MXABLATE_TEST_DATASET names one, else one is made
// from generated text with `mxablate data prepare` (branch trainer). MXABLATE_TEST_REAL_TRAINER
// names a trainer binary built elsewhere (e.g. in the trainer engineer's tree).
TEST_CASE("the real CPU-smoke trainer runs a sweep through Slurm", "[slurm]") {
  std::string trainer = REAL_TRAINER_BIN;
  if (const char* t = std::getenv("MXABLATE_TEST_REAL_TRAINER"); t && *t) trainer = t;
  if (trainer.empty() || !fs::exists(trainer)) {
    MXABLATE_SKIP("mxablate-train is not built in this tree (LibTorch not found at configure time)");
  }
  ScratchDir dir("slurm-real");
  std::string dataset;
  if (const char* d = std::getenv("MXABLATE_TEST_DATASET"); d && *d) {
    dataset = d;
  } else {
    fs::create_directories(dir.path / "text");
    std::ofstream text(dir.path / "text" / "stories.txt");
    // Enough variety for a 256-token BPE (a vocabulary of a dozen words is not).
    const char* adjectives[] = {"old", "quiet", "bright", "young", "small", "dark",
                                "kind", "distant", "cold", "green", "proud", "gentle"};
    const char* nouns[] = {"farmer", "river", "king", "garden", "letter", "horse",
                           "village", "sister", "window", "captain", "mountain", "teacher",
                           "house", "stranger", "field", "ship"};
    const char* verbs[] = {"watched", "found", "carried", "remembered", "followed", "visited",
                           "answered", "saw", "praised", "left", "built", "heard"};
    const char* endings[] = {" near the river", " slowly", " at last", " in the evening",
                             " behind the house", " beyond the mountain", ", and nobody knew why"};
    uint64_t x = 7;
    const auto next = [&x] { return (x = x * 6364136223846793005ull + 1442695040888963407ull) >> 33; };
    for (int doc = 0; doc < 2500; ++doc) {
      const int sentences = 3 + static_cast<int>(next() % 6);
      for (int k = 0; k < sentences; ++k)
        text << "The " << adjectives[next() % 12] << " " << nouns[next() % 16] << " "
             << verbs[next() % 12] << " the " << nouns[next() % 16] << endings[next() % 7]
             << (k + 1 < sentences ? ". " : ".\n");
      text << "\n";
    }
    text.close();
    const CommandResult prep =
        run_mxablate({"data", "prepare", "--input", (dir.path / "text").string(), "--out",
                      (dir.path / "data").string(), "--vocab-size", "256", "--val-fraction",
                      "0.04", "--threads", "2"});
    INFO(prep.output);
    REQUIRE(prep.exit_code == 0);
    dataset = (dir.path / "data").string();
  }
  const fs::path recipe = dir.path / "smoke.yaml";
  std::ofstream(recipe) << fmt::format(R"(name: real-smoke
base:
  model: smoke
  data: {{dataset: {}, seq_len: 64}}
  train: {{global_batch_tokens: 1024, max_tokens: 20480, lr: 3e-3, warmup_tokens: 2048}}
  eval: {{every_tokens: 5120, tokens: 2048}}
  checkpoint: {{every_steps: 10}}
  threads: 1
arms:
  bf16: {{}}
  FDW: {{precision: {{fprop: mxfp4, dgrad: mxfp4, wgrad: mxfp4}}}}
grid:
  seed: [1]
)",
                                       dataset);
  const fs::path db = dir.path / "r.db";
  const auto t0 = Clock::now();
  const CommandResult r = run_mxablate(
      {"run", recipe.string(), "--executor", "slurm", "--db", db.string(), "--runs-dir",
       (dir.path / "runs").string(), "--trainer", trainer, "--slurm-poll", "500ms",
       "--max-parallel", "2", "--progress", "plain"},
      {}, 600s);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  record_timing("real trainer: 2 smoke runs (bf16, FDW) of 20 steps", seconds_since(t0));
  const auto runs = query(db, "SELECT run_id, status FROM runs ORDER BY plan_index");
  REQUIRE(runs.size() == 2);
  for (const auto& run : runs) {
    CHECK(run[1] == "budget_exhausted");
    const auto evals = query(db, fmt::format("SELECT val_loss FROM evals WHERE run_id = '{}' "
                                             "ORDER BY step",
                                             run[0].get<std::string>()));
    REQUIRE(evals.size() >= 3);
    CHECK(evals.back()[0].get<double>() < evals.front()[0].get<double>());  // it learned
    const auto a = query(db, fmt::format("SELECT executor, executor_ref FROM attempts WHERE "
                                         "run_id = '{}'",
                                         run[0].get<std::string>()));
    REQUIRE(a.size() == 1);
    CHECK(a[0][0] == "slurm");
  }
}

TEST_CASE("a task that exceeds its time limit resumes from its checkpoint", "[slurm]") {
  TimeLimitSweep& tl = time_limit_sweep();
  const auto code = tl.process->wait(240s);
  INFO(tl.process->output());
  REQUIRE(code == 0);
  record_timing("time limit: 100 s run under --time 1, resumed", seconds_since(tl.started));
  const Sweep& s = tl.sweep;
  const std::string id = s.run_ids().at(0);
  const auto a = s.attempts(id);
  REQUIRE(a.size() == 2);
  CHECK(a[0][4] == "retry");
  CHECK_THAT(a[0][5].get<std::string>(), has_text("TIMEOUT (its --time limit)"));
  CHECK_THAT(a[0][5].get<std::string>(), has_text("exit code 4"));  // it checkpointed
  CHECK(a[1][3] == 1);
  CHECK(s.status(id) == "budget_exhausted");
  const auto ref = mxablate::orchestrator::parse_slurm_task_ref(a[0][2].get<std::string>());
  REQUIRE(ref);
  CHECK_THAT(read_file(SlurmSweepFiles(s.sweep_dir()).log_file(*ref)),
             has_text("DUE TO TIME LIMIT"));
  CHECK(s.evals(id, s.db) == s.evals(id, s.reference()));
}

// Last: taking the node down would fail every other sweep's tasks too.
TEST_CASE("a task whose node fails resumes from its checkpoint when the node is back", "[slurm]") {
  if (time_limit_sweep_started) time_limit_sweep().process->wait(240s);
  Sweep s("nodefail", fake_recipe("nodefail", 100, {"bf16"}, {1}));
  const auto t0 = Clock::now();
  Mxablate run(s.slurm_args(), {{"MXABLATE_FAKE_STEP_MS", "100"}}, s.dir.path / "mxablate.out");
  std::string run_id;
  REQUIRE(wait_until(
      [&] {
        try {
          const auto ids = s.run_ids();
          if (!ids.empty()) run_id = ids[0];
        } catch (const std::exception&) {
        }
        return !run_id.empty() && s.has_event(run_id, "checkpoint", 20);
      },
      60s));
  const auto down = mxablate::orchestrator::run_command(
      "/bin/sh", {"-c", "scontrol update NodeName=localhost State=DOWN Reason=mxablate-test"}, 30s);
  REQUIRE(down.exit_code == 0);
  // ReturnToService=2 brings the node back as soon as its slurmd registers again; make sure.
  CHECK(wait_until([&] { return s.attempts(run_id).size() > 1; }, 30s));
  mxablate::orchestrator::run_command(
      "/bin/sh", {"-c", "scontrol update NodeName=localhost State=RESUME 2>/dev/null"}, 30s);
  const auto code = run.wait(120s);
  INFO(run.output());
  REQUIRE(code == 0);
  record_timing("node failure: 10 s run, node down at step 20+, resumed", seconds_since(t0));
  const auto a = s.attempts(run_id);
  REQUIRE(a.size() == 2);
  CHECK(a[0][4] == "retry");
  CHECK_THAT(a[0][5].get<std::string>(), has_text("NODE_FAIL"));
  CHECK(a[1][3] == 1);
  CHECK(s.status(run_id) == "budget_exhausted");
  CHECK(s.evals(run_id, s.db) == s.evals(run_id, s.reference()));
}

int main(int argc, char** argv) {
  const auto t0 = Clock::now();
  std::optional<std::string> cannot;
  try {
    cannot = TestCluster::start();
  } catch (const std::exception& e) {
    std::cerr << "slurm_cluster_test: " << e.what() << "\n";
    return 1;
  }
  if (cannot) {
    std::cout << "SKIPPED: the Slurm integration tests need a one-node cluster: " << *cannot << "\n";
    return 77;
  }
  record_timing("cluster start", seconds_since(t0));
  int result = 1;
  try {
    // The longest case first, in the background (unless the command line picks test cases).
    if (argc == 1) time_limit_sweep();
    result = Catch::Session().run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "slurm_cluster_test: " << e.what() << "\n";
  }
  TestCluster::stop();
  record_timing("whole binary", seconds_since(t0));
  std::cout << "timings (" << (getenv("HOSTNAME") ? getenv("HOSTNAME") : "this machine") << "):\n"
            << timings_report();
  return result;
}
