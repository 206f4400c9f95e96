// The Slurm executor's logic against FakeSlurm (slurm_test_support.h), everywhere: one array per
// batch of launches, the journal written before the tasks may start, the shared throttle, how
// each way of ending becomes an AttemptExit, re-attaching, orphans, `mxablate cancel`, and
// squeue outages.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "catch.h"
#include "mxablate/orchestrator/executor_slurm.h"
#include "mxablate/orchestrator/slurm_cancel.h"
#include "mxablate/results/store.h"
#include "slurm_test_support.h"

using namespace mxablate::orchestrator;
using mxablate::results::OpenAttempt;
using mxablate::slurm_test::FakeSlurm;
using mxablate::slurm_test::read_text;
using mxablate::slurm_test::ScratchDir;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

struct Harness {
  ScratchDir dir{"slurm-exec"};
  fs::path sweep_dir = dir.path / "runs" / "demo";
  FakeSlurm* fake = nullptr;
  std::unique_ptr<SlurmExecutor> executor;
  std::vector<std::string> notes;

  explicit Harness(int max_parallel = 0, size_t per_array = 0) {
    fs::create_directories(sweep_dir);
    make(max_parallel, per_array);
  }

  void make(int max_parallel = 0, size_t per_array = 0) {
    auto client = std::make_unique<FakeSlurm>();
    if (fake) *client = *fake;  // a "restarted orchestrator" sees the same cluster
    fake = client.get();
    fake->name_for_new_jobs = slurm_job_name("demo", sweep_dir);
    SlurmExecutorOptions o;
    o.sweep = "demo";
    o.sweep_dir = sweep_dir;
    o.submit.max_parallel = max_parallel;
    o.poll = 0ms;  // every collect_exits asks squeue
    o.unreachable_limit = 300ms;
    o.max_tasks_per_array = per_array;
    executor = std::make_unique<SlurmExecutor>(o, std::move(client));
    executor->set_notify([this](const std::string& line) { notes.push_back(line); });
  }

  LaunchRequest request(const std::string& run_id, int attempt = 1, bool resume = false) {
    const fs::path run_dir = sweep_dir / run_id;
    fs::create_directories(run_dir);
    return {run_id, run_dir, "/opt/mx/mxablate-train", resume, attempt};
  }

  // The sweep loop's first collect_exits scans for orphans; only then may it launch.
  std::vector<AttemptExit> collect() {
    std::this_thread::sleep_for(2ms);
    return executor->collect_exits();
  }

  void write_exit(const std::string& ref, int status) {
    std::ofstream(sweep_dir / "slurm" / (ref + ".exit")) << status << "\n";
  }
};

OpenAttempt open_attempt(const std::string& run_id, const std::string& ref,
                         const fs::path& run_dir, const std::string& executor = "slurm") {
  OpenAttempt a;
  a.run_id = run_id;
  a.attempt = 1;
  a.executor = executor;
  a.executor_ref = ref;
  a.run_dir = run_dir.string();
  return a;
}

}  // namespace

TEST_CASE("one batch of launches is one held, journaled, then released job array") {
  Harness h(/*max_parallel=*/2);
  CHECK(h.executor->capacity() == 0);  // nothing before the first look for orphans
  CHECK(h.collect().empty());
  REQUIRE(h.executor->capacity() >= 3);
  bool journaled_before_release = false;
  h.fake->on_release = [&](const std::string& job) {
    journaled_before_release =
        read_text(h.sweep_dir / "slurm" / "submissions.jsonl").find("\"job_id\":\"" + job + "\"") !=
        std::string::npos;
  };
  const auto results =
      h.executor->launch_batch({h.request("aa"), h.request("bb", 2, true), h.request("cc")});
  REQUIRE(results.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    INFO(results[i].error);
    REQUIRE(results[i].launched);
    CHECK(results[i].launched->executor_ref == "100_" + std::to_string(i));
    CHECK(results[i].launched->device == "cpu");
  }
  CHECK(h.fake->calls == std::vector<std::string>{"submit 0-2%2 hold", "release 100"});
  CHECK(journaled_before_release);
  CHECK(h.executor->running() == 3);

  const std::string script = read_text(h.sweep_dir / "slurm" / "array-0001.sh");
  CHECK_THAT(script, has_text("#SBATCH --array=0-2%2\n"));
  CHECK_THAT(script, has_text("#SBATCH --job-name=" + slurm_job_name("demo", h.sweep_dir)));
  CHECK_THAT(script, has_text("task 1: run bb, attempt 2, resumes from its checkpoint"));
  SlurmSweepFiles files(h.sweep_dir);
  const auto subs = files.read_submissions();
  REQUIRE(subs.size() == 1);
  CHECK(subs[0].job_id == "100");
  CHECK(subs[0].number == 1);
  CHECK(subs[0].array_spec == "0-2%2");
  REQUIRE(subs[0].tasks.size() == 3);
  CHECK(subs[0].tasks[1].run_id == "bb");
  CHECK(subs[0].tasks[1].resume);
  CHECK(subs[0].tasks[1].attempt == 2);
  CHECK(files.next_submission_number() == 2);
}

TEST_CASE("the throttle is shared: a new array only gets the part of K the live ones leave") {
  Harness h(/*max_parallel=*/2);
  h.collect();
  h.executor->launch_batch({h.request("a"), h.request("b"), h.request("c")});
  CHECK(h.executor->capacity() == h.executor->running());  // %2 of 3 live tasks: no room
  h.fake->set_state("100", 0, "RUNNING");
  h.fake->set_state("100", 1, "RUNNING");
  h.collect();
  h.write_exit("100_0", 0);
  h.fake->set_state("100", 0, "COMPLETED");
  auto exits = h.collect();
  REQUIRE(exits.size() == 1);
  CHECK(h.executor->capacity() == h.executor->running());  // b and c still fill %2
  h.write_exit("100_1", 0);
  h.fake->set_state("100", 1, "COMPLETED");
  h.collect();
  REQUIRE(h.executor->running() == 1);  // only c: one of K=2 is free
  REQUIRE(h.executor->capacity() > h.executor->running());
  h.executor->launch_batch({h.request("d", 2, true), h.request("e")});
  CHECK(h.fake->calls.back() == "release 101");
  CHECK(h.fake->jobs.at("101").spec == "0-1%1");
  // K is used up now: a submission anyway (against capacity()) is refused, never unthrottled.
  const auto refused = h.executor->launch_batch({h.request("f")});
  CHECK_FALSE(refused[0].launched);
  CHECK_THAT(refused[0].error, has_text("--max-parallel 2 is used up"));
  CHECK(h.fake->count_calls("submit") == 2);
}

TEST_CASE("without --max-parallel arrays are unthrottled and split at MaxArraySize") {
  Harness h(/*max_parallel=*/0, /*per_array=*/2);
  h.collect();
  const auto r = h.executor->launch_batch({h.request("a"), h.request("b"), h.request("c")});
  CHECK(r[2].launched->executor_ref == "101_0");
  CHECK(h.fake->jobs.at("100").spec == "0-1");
  CHECK(h.fake->jobs.at("101").spec == "0");
  CHECK(h.executor->capacity() == h.executor->running() + 2);
  Harness big;  // the cluster's MaxArraySize 1001 allows 1000 tasks per array
  big.collect();
  CHECK(big.executor->capacity() == 1000);
}

TEST_CASE("each way a task ends becomes an exit with the trainer's status and Slurm's word") {
  Harness h;
  h.collect();
  h.executor->launch_batch({h.request("ok"), h.request("fail"), h.request("timeout"),
                            h.request("killed"), h.request("node"), h.request("nofile")});
  h.fake->set_state("100", 0, "COMPLETED");
  h.write_exit("100_0", 0);
  h.fake->set_state("100", 1, "FAILED", 3 << 8);
  h.write_exit("100_1", 3);
  h.fake->set_state("100", 2, "TIMEOUT", 0, "node7");
  h.write_exit("100_2", 4);  // the trainer checkpointed on Slurm's SIGTERM
  h.fake->set_state("100", 3, "CANCELLED", 0);
  h.write_exit("100_3", 137);
  h.fake->set_state("100", 4, "NODE_FAIL", std::nullopt, "node9");  // no exit file: node died
  h.fake->set_state("100", 5, "FAILED", 2 << 8);  // the script could not write its exit file
  auto exits = h.collect();
  REQUIRE(exits.size() == 6);
  std::map<std::string, AttemptExit> by_run;
  for (auto& e : exits) by_run[e.run_id] = e;
  CHECK(by_run["ok"].exit_code == 0);
  CHECK(by_run["ok"].describe() == "exit code 0; Slurm task 100_0 on node1");
  CHECK(by_run["fail"].exit_code == 3);
  CHECK(by_run["timeout"].exit_code == 4);
  CHECK(by_run["timeout"].describe() ==
        "exit code 4; Slurm task 100_2 TIMEOUT (its --time limit) on node7");
  CHECK(by_run["killed"].signal == 9);
  CHECK_FALSE(by_run["killed"].exit_code);
  CHECK_THAT(by_run["killed"].describe(), has_text("CANCELLED"));
  CHECK_FALSE(by_run["node"].exit_code);
  CHECK_FALSE(by_run["node"].signal);
  CHECK(by_run["node"].describe() ==
        "ended without a known exit status; Slurm task 100_4 NODE_FAIL on node9");
  CHECK(by_run["nofile"].exit_code == 2);  // from squeue's exit_code
  CHECK(h.executor->running() == 0);
}

TEST_CASE("a task squeue stops listing ends only after two polls, without a status") {
  Harness h;
  h.collect();
  h.executor->launch_batch({h.request("a")});
  h.fake->set_state("100", 0, "RUNNING");
  h.collect();
  h.fake->forget("100");
  CHECK(h.collect().empty());  // one answer without it could be a glitch
  const auto exits = h.collect();
  REQUIRE(exits.size() == 1);
  CHECK_FALSE(exits[0].exit_code);
  CHECK_THAT(exits[0].describe(), has_text("is no longer known to Slurm"));
}

TEST_CASE("re-attaching: live tasks are tracked, ended ones reported, forgotten ones judged by "
          "their exit file") {
  Harness h;
  h.collect();
  h.executor->launch_batch({h.request("live"), h.request("done"), h.request("gone"),
                            h.request("lost")});
  h.fake->set_state("100", 0, "RUNNING");
  h.fake->set_state("100", 1, "COMPLETED");
  h.write_exit("100_1", 0);
  // The orchestrator dies; Slurm forgets nothing but job 100's tasks 2 and 3 are "purged".
  h.fake->jobs.at("100").tasks.resize(2);
  h.write_exit("100_2", 1);
  h.make();  // a new orchestrator, same cluster and sweep directory
  const int queries_before = h.fake->queries;
  CHECK(h.executor->recover(open_attempt("live", "100_0", h.sweep_dir / "live"), 1s));
  CHECK(h.executor->recover(open_attempt("done", "100_1", h.sweep_dir / "done"), 1s));
  CHECK(h.executor->recover(open_attempt("gone", "100_2", h.sweep_dir / "gone"), 1s));
  CHECK_FALSE(h.executor->recover(open_attempt("lost", "100_3", h.sweep_dir / "lost"), 1s));
  CHECK_FALSE(h.executor->recover(open_attempt("weird", "not-a-ref", h.sweep_dir), 1s));
  CHECK(h.fake->queries - queries_before == 1);  // one squeue for the whole recovery
  CHECK(h.executor->running() == 1);
  CHECK(h.executor->status_of("live")->state.name == "RUNNING");
  const auto exits = h.collect();
  REQUIRE(exits.size() == 2);
  CHECK(exits[0].run_id == "done");
  CHECK(exits[0].exit_code == 0);
  CHECK(exits[1].run_id == "gone");
  CHECK(exits[1].exit_code == 1);
  CHECK_THAT(exits[1].describe(), has_text("no longer known to Slurm"));
  CHECK(h.fake->count_calls("submit") == 1);  // nothing submitted twice
  CHECK(h.fake->count_calls("cancel") == 0);  // the live task was adopted, not an orphan
}

TEST_CASE("a journaled task no attempt claims is cancelled before anything new is submitted") {
  Harness h;
  h.collect();
  h.executor->launch_batch({h.request("a"), h.request("b")});
  h.fake->set_state("100", 0, "RUNNING");
  h.fake->set_state("100", 1, "RUNNING");
  // Died after sbatch but before the database recorded b's attempt; also left a job held and
  // unjournaled (died between sbatch --hold and the journal).
  h.fake->submit(h.sweep_dir / "slurm" / "array-0002.sh", "0", true);
  h.make();
  h.fake->cancel_ends_tasks = false;  // as on a real cluster, they take a moment to go
  REQUIRE(h.executor->recover(open_attempt("a", "100_0", h.sweep_dir / "a"), 1s));
  h.collect();
  CHECK(std::count(h.fake->calls.begin(), h.fake->calls.end(), "cancel 100_1") == 1);
  CHECK(std::count(h.fake->calls.begin(), h.fake->calls.end(), "cancel 101_0") == 1);
  CHECK(std::count(h.fake->calls.begin(), h.fake->calls.end(), "cancel 100_0") == 0);
  CHECK(h.executor->capacity() == h.executor->running());  // nothing new while they drain
  h.fake->set_state("100", 1, "CANCELLED");
  h.collect();
  CHECK(h.executor->capacity() == h.executor->running());  // 101_0 still there
  h.fake->set_state("101", 0, "CANCELLED");
  h.collect();
  CHECK(h.executor->capacity() > h.executor->running());
  CHECK(h.executor->running() == 1);
  REQUIRE_FALSE(h.notes.empty());
  CHECK_THAT(h.notes.front(), has_text("cancelling Slurm task 100_1 (run b)"));
}

TEST_CASE("a job of the sweep's name that mxablate did not submit stops the sweep") {
  Harness h;
  h.fake->submit("/elsewhere/array-0001.sh", "0-1", false);  // submitted by hand
  CHECK_THROWS_WITH(h.executor->collect_exits(),
                    has_text("were not submitted by mxablate") &&
                        has_text("scancel 100"));
}

TEST_CASE("a cancel recorded while we run stops submissions and stopping no longer detaches") {
  Harness h;
  h.collect();
  h.executor->launch_batch({h.request("a")});
  CHECK(h.executor->detaches_on_stop());
  CHECK_FALSE(h.executor->cancel_requested());
  const SlurmCancelReport report =
      cancel_sweep_jobs(*h.fake, "demo", h.sweep_dir, {"100_0"}, "me@here");
  CHECK(report.job_ids == std::vector<std::string>{"100"});
  CHECK(report.queued == 1);
  CHECK(report.running == 0);
  // First the sweep loop must turn the cancel into a stop; the exits follow on the next call, so
  // they are recorded as interrupted rather than retried.
  CHECK(h.collect().empty());
  CHECK(h.executor->cancel_requested());
  CHECK_FALSE(h.executor->detaches_on_stop());
  CHECK(h.executor->capacity() == h.executor->running());
  const auto refused = h.executor->launch_batch({h.request("b")});
  CHECK_FALSE(refused[0].launched);
  CHECK_THAT(refused[0].error, has_text("being cancelled"));
  const auto exits = h.collect();
  REQUIRE(exits.size() == 1);
  CHECK_THAT(exits[0].describe(), has_text("CANCELLED (by mxablate cancel)"));
  REQUIRE_FALSE(h.notes.empty());
  CHECK_THAT(h.notes.back(), has_text("by me@here"));
}

TEST_CASE("a cancel from before this orchestrator started only labels what it cancelled") {
  Harness h;
  h.collect();
  h.executor->launch_batch({h.request("a")});
  cancel_sweep_jobs(*h.fake, "demo", h.sweep_dir, {}, "me@here");
  h.make();  // the next `mxablate run`
  REQUIRE(h.executor->recover(open_attempt("a", "100_0", h.sweep_dir / "a"), 1s));
  const auto exits = h.collect();
  REQUIRE(exits.size() == 1);
  CHECK_THAT(exits[0].describe(), has_text("(by mxablate cancel)"));
  CHECK_FALSE(h.executor->cancel_requested());
  CHECK(h.executor->capacity() > 0);
}

TEST_CASE("cancelling a sweep with nothing live records nothing") {
  Harness h;
  const SlurmCancelReport r = cancel_sweep_jobs(*h.fake, "demo", h.sweep_dir, {}, "me@here");
  CHECK(r.job_ids.empty());
  CHECK_FALSE(fs::exists(h.sweep_dir / "slurm" / "cancels.jsonl"));
}

TEST_CASE("squeue outages are ridden out until the limit, then end the sweep with a reason") {
  Harness h;
  h.collect();
  h.executor->launch_batch({h.request("a")});
  h.fake->query_failures = 1000;
  CHECK(h.collect().empty());
  CHECK_THAT(h.notes.back(), has_text("Unable to contact slurm controller"));
  std::this_thread::sleep_for(350ms);
  CHECK_THROWS_WITH(h.collect(), has_text("Slurm has not answered for"));
  h.fake->query_failures = 0;
  h.collect();  // answering again resets the clock
  CHECK(h.notes.back() == "Slurm answers again");
  h.fake->query_failures = 1;
  h.fake->query_failures_transient = false;
  CHECK_THROWS_WITH(h.collect(), has_text("Unable to contact"));
}

TEST_CASE("sbatch is tried again after a timeout, a refusal fails the batch with its reason") {
  Harness h;
  h.collect();
  h.fake->submit_failures = 1;
  const auto ok = h.executor->launch_batch({h.request("a")});
  REQUIRE(ok[0].launched);
  CHECK(h.fake->count_calls("submit") == 2);
  h.fake->submit_failures = 1;
  h.fake->submit_failures_transient = false;
  const auto refused = h.executor->launch_batch({h.request("b"), h.request("c")});
  REQUIRE(refused.size() == 2);
  CHECK_FALSE(refused[0].launched);
  CHECK_FALSE(refused[1].launched);
  CHECK_THAT(refused[1].error, has_text("sbatch failed"));
  CHECK(h.executor->running() == 1);
  // The refused script stays for inspection and the next submission gets a new number.
  CHECK(fs::exists(h.sweep_dir / "slurm" / "array-0002.sh"));
  h.executor->launch_batch({h.request("d")});
  CHECK(fs::exists(h.sweep_dir / "slurm" / "array-0003.sh"));
}

TEST_CASE("an attempt of the local executor is made sure of, not adopted") {
  Harness h;
  // A pid that cannot be a trainer for this run directory: nothing to stop, nothing to adopt.
  CHECK_FALSE(h.executor->recover(open_attempt("a", "pid:1", h.sweep_dir / "a", "local"), 1s));
}

TEST_CASE("stops and kills of one loop iteration go to Slurm as one scancel each") {
  Harness h;
  h.collect();
  h.executor->launch_batch({h.request("a"), h.request("b"), h.request("c")});
  h.fake->cancel_ends_tasks = false;
  h.executor->request_stop("b");
  h.executor->request_stop("c");
  h.executor->request_stop("unknown");  // not ours: nothing
  CHECK(h.fake->count_calls("cancel") == 0);
  h.collect();
  CHECK(h.fake->count_calls("cancel") == 2);
  CHECK(h.fake->calls[h.fake->calls.size() - 2] == "cancel 100_1");
  CHECK(h.fake->calls.back() == "cancel 100_2");
  h.executor->kill("a");
  h.collect();
  CHECK(h.fake->count_calls("kill 100_0") == 1);
  CHECK(h.fake->calls.back() == "cancel 100_0");  // a pending task ignores signals
  h.collect();
  CHECK(h.fake->count_calls("kill") == 1);  // sent once
}

TEST_CASE("a job id Slurm gave to someone else's job is not taken for ours") {
  Harness h;
  h.collect();
  h.executor->launch_batch({h.request("a")});
  h.fake->set_state("100", 0, "RUNNING");
  h.collect();
  // The cluster's state was reset and job 100 is now another user's.
  h.fake->task("100", 0).name = "someone-elses-job";
  h.make();
  CHECK_FALSE(h.executor->recover(open_attempt("a", "100_0", h.sweep_dir / "a"), 1s));
  const SlurmCancelReport r = cancel_sweep_jobs(*h.fake, "demo", h.sweep_dir, {"100_0"}, "me");
  CHECK(r.job_ids.empty());
  CHECK(h.fake->count_calls("cancel") == 0);
}

TEST_CASE("queued tasks are reported as such until Slurm starts them") {
  Harness h;
  h.collect();
  h.executor->launch_batch({h.request("a")});
  CHECK(h.executor->queued("a"));
  CHECK_FALSE(h.executor->queued("unknown"));
  h.fake->set_state("100", 0, "RUNNING");
  h.collect();
  CHECK_FALSE(h.executor->queued("a"));
  REQUIRE_FALSE(h.notes.empty());
  CHECK_THAT(h.notes.back(), has_text("[a] Slurm task 100_0 started on node1 after"));
}

TEST_CASE("runs of different rank counts go into different arrays, each with its own request") {
  Harness h(/*max_parallel=*/3);
  h.collect();
  const auto ranked = [&](const std::string& run_id, int ranks) {
    LaunchRequest r = h.request(run_id);
    r.ranks = ranks;
    return r;
  };
  // K = 3: a batch of 2 one-rank runs and 1 two-rank run fits (throttles 2 and 1) …
  CHECK(h.executor->fits({1, 2, 1}));
  CHECK(h.executor->fits({1, 1, 1, 1, 2}) == false);  // the 1-rank array takes all of K
  CHECK(h.executor->fits({2, 2, 2, 2}));                // one array, throttled to 3
  const auto r = h.executor->launch_batch({ranked("a", 1), ranked("w", 2), ranked("b", 1)});
  REQUIRE(r.size() == 3);
  for (const auto& x : r) REQUIRE(x.launched);
  // Results in request order; a and b share array 100, w is alone in 101.
  CHECK(r[0].launched->executor_ref == "100_0");
  CHECK(r[1].launched->executor_ref == "101_0");
  CHECK(r[2].launched->executor_ref == "100_1");
  CHECK(h.fake->jobs.at("100").spec == "0-1");
  CHECK(h.fake->jobs.at("101").spec == "0");
  const std::string one = read_text(h.fake->jobs.at("100").script);
  const std::string two = read_text(h.fake->jobs.at("101").script);
  CHECK_THAT(one, has_text("\nranks=1 "));
  CHECK_THAT(two, has_text("\nranks=2 "));
  CHECK_THAT(two, has_text("#SBATCH --cpus-per-task=2\n"));
  CHECK_THAT(two, has_text("run w, attempt 1"));
  CHECK(h.executor->capacity() == h.executor->running());  // K = 3 is used up
  CHECK_FALSE(h.executor->fits({1}));
}
