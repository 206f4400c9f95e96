// The job-array script (slurm_array_script.h): its #SBATCH header, option validation, and — run
// with bash as Slurm would run it, no Slurm needed — what a task does: which run directory, the
// --resume flag, logs, the exit file, signal forwarding, and a run directory that is not there.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "catch.h"
#include "mxablate/orchestrator/slurm_array_script.h"
#include "slurm_test_support.h"

using namespace mxablate::orchestrator;
namespace fs = std::filesystem;
using mxablate::slurm_test::read_text;
using mxablate::slurm_test::ScratchDir;

namespace {

ArrayScript two_task_script(const fs::path& root, const fs::path& trainer) {
  ArrayScript s;
  s.sweep = "demo";
  s.submission = 3;
  s.job_name = slurm_job_name("demo", root / "runs" / "demo");
  s.slurm_dir = root / "runs" / "demo" / "slurm";
  s.trainer = trainer;
  s.tasks = {{"aaaa1111", root / "runs" / "demo" / "aaaa1111", 1, false},
             {"bbbb2222", root / "runs" / "demo" / "bbbb 2222's", 3, true}};
  s.written_at = "2026-01-01 00:00:00";
  for (const ArrayTask& t : s.tasks) {
    fs::create_directories(t.run_dir);
    std::ofstream(t.run_dir / "config.json") << "{}\n";
  }
  fs::create_directories(s.slurm_dir);
  return s;
}

// A stand-in trainer: records its arguments and environment, then exits as told.
fs::path write_fake_trainer(const fs::path& dir, const std::string& body) {
  const fs::path p = dir / "trainer.sh";
  std::ofstream(p) << "#!/bin/bash\n"
                      "echo \"args: $*\" >>\"$2/calls.txt\"\n"
                      "echo \"attempt=$MXABLATE_ATTEMPT slot=$MXABLATE_SLOT "
                      "omp=${OMP_NUM_THREADS:-unset}\" >>\"$2/calls.txt\"\n"
                      "echo trainer-stdout\n"
                      "echo trainer-stderr >&2\n"
                   << body;
  fs::permissions(p, fs::perms::owner_all);
  return p;
}

// Runs the script like slurmstepd would for one task; returns the wait status.
struct TaskProcess {
  pid_t pid = -1;
  TaskProcess(const fs::path& script, int task, const std::string& job,
              const char* cpus_per_task = nullptr) {
    pid = ::fork();
    if (pid == 0) {
      ::unsetenv("OMP_NUM_THREADS");
      if (cpus_per_task)
        ::setenv("SLURM_CPUS_PER_TASK", cpus_per_task, 1);
      else
        ::unsetenv("SLURM_CPUS_PER_TASK");
      ::setenv("SLURM_ARRAY_TASK_ID", std::to_string(task).c_str(), 1);
      ::setenv("SLURM_ARRAY_JOB_ID", job.c_str(), 1);
      ::execl("/bin/bash", "bash", script.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  int wait() {
    int status = 0;
    ::waitpid(pid, &status, 0);
    return status;
  }
};

}  // namespace

TEST_CASE("array specs carry the throttle only when it limits something") {
  CHECK(array_spec(1, 0) == "0");
  CHECK(array_spec(4, 0) == "0-3");
  CHECK(array_spec(4, 2) == "0-3%2");
  CHECK(array_spec(4, 4) == "0-3");
  CHECK(array_spec(4, 9) == "0-3");
  CHECK(array_spec(1, 1) == "0");
}

TEST_CASE("Slurm time limits are checked before anything is submitted") {
  for (const char* ok : {"30", "30:00", "4:00:00", "1-00", "1-12:30", "2-12:30:00", "INFINITE",
                         "UNLIMITED", "0:05"})
    CHECK(is_slurm_time_limit(ok));
  for (const char* bad : {"", "1h", "4:00:00:00", "-1", "1-", "ab", "1:2:3:4", "1:000", " 30"})
    CHECK_FALSE(is_slurm_time_limit(bad));
}

TEST_CASE("submit options that cannot work are refused with one line naming the option") {
  SlurmSubmitOptions o;
  CHECK_NOTHROW(validate_slurm_submit_options(o));
  o.time_limit = "2h";
  CHECK_THROWS_WITH(validate_slurm_submit_options(o), has_text("--time: '2h'"));
  o = {};
  o.sbatch_args = {"--account=abc", "--qos=high", "--exclusive"};
  CHECK_NOTHROW(validate_slurm_submit_options(o));
  for (const char* reserved : {"--array=0-3", "--output=x.log", "-Jname", "--job-name=x",
                               "--requeue", "--export=NONE", "--chdir=/"}) {
    o.sbatch_args = {reserved};
    CHECK_THROWS_WITH(validate_slurm_submit_options(o), has_text("mxablate sets"));
  }
  o.sbatch_args = {"account=abc"};
  CHECK_THROWS_WITH(validate_slurm_submit_options(o), has_text("not one sbatch option"));
  o.sbatch_args = {"--comment=a\nb"};
  CHECK_THROWS_WITH(validate_slurm_submit_options(o), has_text("not one sbatch option"));
  o = {};
  o.partition = "gpu a100";
  CHECK_THROWS_WITH(validate_slurm_submit_options(o), has_text("--partition"));
  o = {};
  o.max_parallel = -1;
  CHECK_THROWS_WITH(validate_slurm_submit_options(o), has_text("--max-parallel"));
}

TEST_CASE("job names are per sweep directory and stable") {
  const std::string a = slurm_job_name("demo", "/shared/runs/demo");
  CHECK(a.rfind("mxablate-demo-", 0) == 0);
  CHECK(a.size() == std::string("mxablate-demo-").size() + 8);
  CHECK(slurm_job_name("demo", "/shared/runs/demo") == a);
  CHECK(slurm_job_name("demo", "/shared/runs/./demo") == a);
  CHECK(slurm_job_name("demo", "/other/runs/demo") != a);
}

TEST_CASE("the script's header holds every option as an #SBATCH line") {
  ScratchDir dir("script-header");
  ArrayScript s = two_task_script(dir.path, "/opt/mx/mxablate-train");
  s.options.partition = "gpu";
  s.options.time_limit = "4:00:00";
  s.options.gpus_per_run = 2;
  s.options.sbatch_args = {"--account=abc", "--exclusive", "--comment=two words"};
  const std::string t = render_array_script(s, "0-1%1");
  const std::string slurm_dir = s.slurm_dir.string();
  CHECK(t.rfind("#!/bin/bash\n", 0) == 0);
  CHECK_THAT(t, has_text("#SBATCH --job-name=" + s.job_name + "\n"));
  CHECK_THAT(t, has_text("#SBATCH --array=0-1%1\n"));
  CHECK_THAT(t, has_text("#SBATCH --output=" + slurm_dir + "/%A_%a.log\n"));
  CHECK_THAT(t, has_text("#SBATCH --chdir=" + slurm_dir + "\n"));
  CHECK_THAT(t, has_text("#SBATCH --no-requeue\n"));
  CHECK_THAT(t, has_text("#SBATCH --partition=gpu\n"));
  CHECK_THAT(t, has_text("#SBATCH --time=4:00:00\n"));
  CHECK_THAT(t, has_text("#SBATCH --gres=gpu:2\n"));
  CHECK_THAT(t, has_text("#SBATCH --account=abc\n"));
  CHECK_THAT(t, has_text("#SBATCH --exclusive\n"));
  CHECK_THAT(t, has_text("#SBATCH --comment=\"two words\"\n"));
  CHECK_THAT(t, has_text("task 1: run bbbb2222, attempt 3, resumes from its checkpoint"));
  // Slurm stops reading #SBATCH lines at the first command: all of them come before `set -u`.
  CHECK(t.rfind("#SBATCH") < t.find("\nset -u\n"));
  // No time limit, partition or GPUs unless asked for.
  const std::string plain = render_array_script(two_task_script(dir.path, "/x"), "0-1");
  CHECK(plain.find("--partition") == std::string::npos);
  CHECK(plain.find("--time") == std::string::npos);
  CHECK(plain.find("--gres") == std::string::npos);
}

TEST_CASE("a percent sign in the sweep directory survives Slurm's file-name patterns") {
  ScratchDir dir("script-pct");
  ArrayScript s = two_task_script(dir.path, "/x");
  s.slurm_dir = "/shared/100%/demo/slurm";
  CHECK_THAT(render_array_script(s, "0-1"),
             has_text("#SBATCH --output=/shared/100%%/demo/slurm/%A_%a.log\n"));
}

TEST_CASE("a task runs the trainer for its own run directory and records its exit status") {
  ScratchDir dir("script-run");
  const fs::path trainer = write_fake_trainer(dir.path, "exit 3\n");
  const ArrayScript s = two_task_script(dir.path, trainer);
  const fs::path script = dir.path / "array.sh";
  std::ofstream(script) << render_array_script(s, "0-1");

  TaskProcess t1(script, 1, "77", "3");
  const int status = t1.wait();
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 3);
  const fs::path run1 = s.tasks[1].run_dir;
  const std::string calls = read_text(run1 / "calls.txt");
  CHECK_THAT(calls, has_text("args: --run-dir " + run1.string() + " --resume\n"));
  CHECK_THAT(calls, has_text("attempt=3 slot=77_1 omp=3"));  // --cpus-per-task=3
  CHECK(read_text(s.slurm_dir / "77_1.exit") == "3\n");
  CHECK_FALSE(fs::exists(s.slurm_dir / "77_1.exit.tmp"));
  const std::string out = read_text(run1 / "stdout.log");
  CHECK(out.rfind("=== mxablate: attempt 3 (resume) as Slurm job 77_1 on ", 0) == 0);
  CHECK_THAT(out, has_text("trainer-stdout\n"));
  CHECK_THAT(read_text(run1 / "stderr.log"), has_text("trainer-stderr\n"));
  CHECK_FALSE(fs::exists(s.tasks[0].run_dir / "calls.txt"));  // task 0 untouched

  TaskProcess t0(script, 0, "77");
  CHECK(WEXITSTATUS(t0.wait()) == 3);
  CHECK_THAT(read_text(s.tasks[0].run_dir / "calls.txt"),
             has_text("args: --run-dir " + s.tasks[0].run_dir.string() + "\n"));
  CHECK_THAT(read_text(s.tasks[0].run_dir / "calls.txt"), has_text("omp=unset"));
}

TEST_CASE("SIGTERM to the task's shell alone reaches the trainer, whose exit status is kept") {
  ScratchDir dir("script-term");
  // Like mxablate-train: on SIGTERM it checkpoints (here: a short sleep) and exits 4.
  const fs::path trainer = write_fake_trainer(
      dir.path,
      "trap 'echo got-term >>\"$2/calls.txt\"; sleep 0.3; exit 4' TERM\n"
      "echo started >>\"$2/calls.txt\"\n"
      "for i in $(seq 1 200); do sleep 0.05; done\nexit 0\n");
  const ArrayScript s = two_task_script(dir.path, trainer);
  const fs::path script = dir.path / "array.sh";
  std::ofstream(script) << render_array_script(s, "0-1");
  TaskProcess task(script, 0, "5");
  const fs::path calls = s.tasks[0].run_dir / "calls.txt";
  for (int i = 0; i < 200 && read_text(calls).find("started") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ::kill(task.pid, SIGTERM);  // only the shell, as --signal=B:TERM does
  const int status = task.wait();
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 4);
  CHECK_THAT(read_text(calls), has_text("got-term"));
  CHECK(read_text(s.slurm_dir / "5_0.exit") == "4\n");
}

TEST_CASE("a task waits for a trainer still running in its run directory") {
  ScratchDir dir("script-lock");
  // Each trainer notes when it starts and ends; the first lives for a second.
  const fs::path trainer = write_fake_trainer(
      dir.path,
      "echo \"start $(date +%s%N)\" >>\"$2/order.txt\"\n"
      "[ \"$MXABLATE_SLOT\" = 1_0 ] && sleep 1\n"
      "echo \"end $(date +%s%N)\" >>\"$2/order.txt\"\nexit 0\n");
  ArrayScript s = two_task_script(dir.path, trainer);
  s.tasks[1].run_dir = s.tasks[0].run_dir;  // the old task and its resubmission
  const fs::path script = dir.path / "array.sh";
  std::ofstream(script) << render_array_script(s, "0-1");
  TaskProcess old_task(script, 0, "1");
  const fs::path order = s.tasks[0].run_dir / "order.txt";
  for (int i = 0; i < 200 && read_text(order).empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  TaskProcess new_task(script, 1, "2");
  CHECK(WEXITSTATUS(new_task.wait()) == 0);
  CHECK(WEXITSTATUS(old_task.wait()) == 0);
  std::istringstream lines(read_text(order));
  std::string what;
  long long t = 0;
  std::vector<std::pair<std::string, long long>> events;
  while (lines >> what >> t) events.emplace_back(what, t);
  REQUIRE(events.size() == 4);
  // start, end of the old trainer; only then start, end of the new one.
  CHECK(events[0].first == "start");
  CHECK(events[1].first == "end");
  CHECK(events[2].first == "start");
  CHECK(events[2].second >= events[1].second);
}

TEST_CASE("a trainer killed by a signal is recorded as 128 + the signal") {
  ScratchDir dir("script-kill");
  const fs::path trainer = write_fake_trainer(dir.path, "kill -9 $$\n");
  const ArrayScript s = two_task_script(dir.path, trainer);
  const fs::path script = dir.path / "array.sh";
  std::ofstream(script) << render_array_script(s, "0-1");
  TaskProcess task(script, 0, "6");
  CHECK(WEXITSTATUS(task.wait()) == 137);
  CHECK(read_text(s.slurm_dir / "6_0.exit") == "137\n");
}

TEST_CASE("a run directory the node cannot see ends the task with exit code 66 and a reason") {
  ScratchDir dir("script-noshare");
  const fs::path trainer = write_fake_trainer(dir.path, "exit 0\n");
  const ArrayScript s = two_task_script(dir.path, trainer);
  fs::remove(s.tasks[0].run_dir / "config.json");
  const fs::path script = dir.path / "array.sh";
  std::ofstream(script) << render_array_script(s, "0-1");
  const fs::path err = dir.path / "task.err";
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setenv("SLURM_ARRAY_TASK_ID", "0", 1);
    ::setenv("SLURM_ARRAY_JOB_ID", "9", 1);
    std::freopen(err.c_str(), "w", stderr);
    ::execl("/bin/bash", "bash", script.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  CHECK(WEXITSTATUS(status) == 66);
  CHECK_THAT(read_text(err), has_text("is not visible on"));
  CHECK_THAT(read_text(err), has_text("shared"));
  CHECK_FALSE(fs::exists(s.tasks[0].run_dir / "calls.txt"));
}

TEST_CASE("a run of N ranks is one task with N x the GPUs and CPUs, and each rank gets its threads") {
  ScratchDir dir("script-ranks");
  const fs::path trainer = write_fake_trainer(dir.path, "exit 0\n");
  ArrayScript s = two_task_script(dir.path, trainer);
  s.options.gpus_per_run = 1;
  s.options.sbatch_args = {"--account=abc", "--cpus-per-task=4"};
  const std::string one = render_array_script(s, "0-1");
  CHECK_THAT(one, has_text("#SBATCH --gres=gpu:1\n"));
  CHECK_THAT(one, has_text("#SBATCH --cpus-per-task=4\n"));
  CHECK_THAT(one, has_text("\nranks=1 "));

  s.ranks = 2;
  const std::string t = render_array_script(s, "0-1");
  CHECK_THAT(t, has_text("#SBATCH --ntasks=1\n"));  // one task: the trainer starts its ranks
  CHECK_THAT(t, has_text("#SBATCH --gres=gpu:2\n"));
  CHECK_THAT(t, has_text("#SBATCH --cpus-per-task=8\n"));
  CHECK(t.find("--cpus-per-task=4") == std::string::npos);
  CHECK_THAT(t, has_text("#SBATCH --account=abc\n"));
  CHECK_THAT(t, has_text("\nranks=2 "));
  CHECK(t.rfind("#SBATCH") < t.find("\nset -u\n"));
  // Without --cpus-per-task, one CPU per rank; -cN is read like --cpus-per-task=N.
  s.options.sbatch_args = {};
  CHECK_THAT(render_array_script(s, "0-1"), has_text("#SBATCH --cpus-per-task=2\n"));
  s.options.sbatch_args = {"-c3"};
  const std::string short_form = render_array_script(s, "0-1");
  CHECK_THAT(short_form, has_text("#SBATCH --cpus-per-task=6\n"));
  CHECK(short_form.find("-c3") == std::string::npos);

  // Run as Slurm would with the 8 CPUs it gave the task: 4 threads per rank.
  s.options.sbatch_args = {"--cpus-per-task=4"};
  const fs::path script = dir.path / "array.sh";
  std::ofstream(script) << render_array_script(s, "0-1");
  TaskProcess task(script, 0, "78", "8");
  CHECK(WEXITSTATUS(task.wait()) == 0);
  CHECK_THAT(read_text(s.tasks[0].run_dir / "calls.txt"), has_text("slot=78_0 omp=4"));
  TaskProcess few(script, 1, "78", "1");  // fewer CPUs than ranks: still one thread each
  CHECK(WEXITSTATUS(few.wait()) == 0);
  CHECK_THAT(read_text(s.tasks[1].run_dir / "calls.txt"), has_text("slot=78_1 omp=1"));
}

TEST_CASE("The --cpus-per-task value must be a whole number: it is scaled by a run's ranks") {
  SlurmSubmitOptions o;
  CHECK_FALSE(sbatch_cpus_per_task(o.sbatch_args));
  o.sbatch_args = {"--cpus-per-task=8", "--account=abc"};
  CHECK(sbatch_cpus_per_task(o.sbatch_args) == 8);
  o.sbatch_args = {"-c2", "--cpus-per-task=5"};  // the last one given, as sbatch reads them
  CHECK(sbatch_cpus_per_task(o.sbatch_args) == 5);
  for (const char* bad : {"--cpus-per-task=many", "--cpus-per-task=0", "--cpus-per-task=-2",
                          "--cpus-per-task", "-cx", "--cpus-per-task=4x"}) {
    o.sbatch_args = {bad};
    INFO(bad);
    CHECK_THROWS_WITH(validate_slurm_submit_options(o), has_text("needs a whole number of CPUs"));
  }
}
