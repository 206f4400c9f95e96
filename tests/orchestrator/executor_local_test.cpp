// The local executor: slots and their environment, arguments, log files, exit codes and
// signals, stopping and killing, and recovering an orphaned trainer left by a dead orchestrator.
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "catch.h"
#include "mxablate/orchestrator/executor_local.h"
#include "mxablate/results/store.h"
#include "test_util.h"

using namespace mxablate::orchestrator;
using namespace mxablate::testing;
namespace fs = std::filesystem;

namespace {

// A stand-in trainer that records how it was started, then does what RUN_DIR/behaviour says.
fs::path write_script_trainer(const TempDir& dir) {
  const fs::path p = dir.path() / "trainer.sh";
  write_file(p, R"SH(#!/bin/sh
# args: --run-dir DIR [--resume]
dir="$2"
behaviour=$(cat "$dir/behaviour")
# Signal handling first: the test acts as soon as started.txt appears.
case "$behaviour" in
  sleep) trap 'echo got-term > "$dir/term.txt"; exit 4' TERM ;;
  stubborn) trap '' TERM ;;
  ranks)  # a launcher: two rank processes in its process group, the run directory in their
          # command lines, as the trainer's ranks have
    for r in 0 1; do
      sh -c 'while :; do sleep 0.05; done' rank "$dir" &
      echo $! >> "$dir/ranks.txt"
    done ;;
esac
{
  echo "args=$*"
  echo "cuda=${CUDA_VISIBLE_DEVICES-unset} hip=${HIP_VISIBLE_DEVICES-unset}"
  echo "attempt=$MXABLATE_ATTEMPT slot=$MXABLATE_SLOT"
  echo "standby=${MXABLATE_STANDBY_FD-unset}"
  echo "pgid=$(cut -d' ' -f5 /proc/$$/stat) pid=$$"
} > "$dir/started.tmp"
mv "$dir/started.tmp" "$dir/started.txt"
echo "to stdout"
echo "to stderr" >&2
case "$behaviour" in
  exit*) exit "$(cat "$dir/code")" ;;
  *) while :; do sleep 0.02; done ;;
esac
)SH");
  ::chmod(p.c_str(), 0755);
  return p;
}

fs::path run_dir(const TempDir& dir, const std::string& name, const std::string& behaviour,
                 int code = 0) {
  const fs::path d = dir.path() / name;
  fs::create_directories(d);
  write_file(d / "behaviour", behaviour);
  write_file(d / "code", std::to_string(code));
  return d;
}

// Whether `pid` is a live process (not gone, not a zombie).
bool alive(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] != 'Z';
}

std::vector<int> rank_pids(const fs::path& run_dir) {
  std::vector<int> pids;
  std::istringstream in(read_file(run_dir / "ranks.txt"));
  for (int pid = 0; in >> pid;) pids.push_back(pid);
  return pids;
}

std::vector<AttemptExit> wait_exits(LocalExecutor& ex, size_t n) {
  std::vector<AttemptExit> all;
  eventually([&] {
    for (auto& e : ex.collect_exits()) all.push_back(e);
    return all.size() >= n;
  });
  return all;
}

}  // namespace

TEST_CASE("slots: N CPU slots, or K per GPU with the GPU in CUDA/HIP_VISIBLE_DEVICES") {
  ::unsetenv("OMP_NUM_THREADS");
  const auto cpu = cpu_slots(2, 8);
  REQUIRE(cpu.size() == 2);
  CHECK(cpu[1].label == "cpu1");
  CHECK(cpu[1].device == "cpu");
  CHECK(cpu[1].env.at("OMP_NUM_THREADS") == "4");  // 8 cores over 2 slots
  CHECK(cpu_slots(3, 2)[0].env.at("OMP_NUM_THREADS") == "1");
  ::setenv("OMP_NUM_THREADS", "3", 1);  // the user's choice wins
  CHECK(cpu_slots(2, 8)[0].env.count("OMP_NUM_THREADS") == 0);
  ::unsetenv("OMP_NUM_THREADS");
  const auto gpu = gpu_slots({0, 3}, 2);
  REQUIRE(gpu.size() == 4);
  // Interleaved, so that the first runs spread over all GPUs.
  CHECK(gpu[0].label == "gpu0.0");
  CHECK(gpu[1].label == "gpu3.0");
  CHECK(gpu[2].label == "gpu0.1");
  CHECK(gpu[1].device == "cuda:3");
  CHECK(gpu[1].env.at("CUDA_VISIBLE_DEVICES") == "3");
  CHECK(gpu[1].env.at("HIP_VISIBLE_DEVICES") == "3");
  CHECK(gpu_slots({1}, 1)[0].label == "gpu1");
}

TEST_CASE("a launch passes the run directory, --resume, the slot's GPU and logs to files") {
  TempDir dir;
  const fs::path trainer = write_script_trainer(dir);
  LocalExecutor ex(gpu_slots({5}, 1));
  const fs::path d = run_dir(dir, "r1", "exit", 0);
  const Launched l = ex.launch({"r1", d, trainer, true, 2});
  CHECK(l.slot == "gpu5");
  CHECK(l.device == "cuda:5");
  CHECK(l.executor_ref.rfind("pid:", 0) == 0);
  CHECK(ex.running() == 1);
  const auto exits = wait_exits(ex, 1);
  REQUIRE(exits.size() == 1);
  CHECK(exits[0].run_id == "r1");
  CHECK(exits[0].exit_code == 0);
  CHECK_FALSE(exits[0].signal);
  CHECK(ex.running() == 0);
  const std::string started = read_file(d / "started.txt");
  CHECK(contains(started, "args=--run-dir " + d.string() + " --resume"));
  CHECK(contains(started, "cuda=5 hip=5"));
  CHECK(contains(started, "attempt=2 slot=gpu5"));
  // Its own process group (Ctrl-C at the terminal reaches only the orchestrator).
  int pgid = 0, pid = 0;
  REQUIRE(std::sscanf(started.c_str() + started.find("pgid="), "pgid=%d pid=%d", &pgid, &pid) == 2);
  CHECK(pgid == pid);
  const std::string out = read_file(d / "stdout.log");
  CHECK(contains(out, "=== mxablate: attempt 2 (resume) in slot gpu5 at "));
  CHECK(contains(out, "to stdout\n"));
  CHECK(contains(read_file(d / "stderr.log"), "to stderr\n"));
  // A second attempt appends to the logs.
  ex.launch({"r1", d, trainer, false, 3});
  wait_exits(ex, 1);
  const std::string out2 = read_file(d / "stdout.log");
  CHECK(contains(out2, "attempt 2 (resume)"));
  CHECK(contains(out2, "attempt 3 in slot gpu5"));
}

TEST_CASE("exit codes and signals are reported as such") {
  TempDir dir;
  const fs::path trainer = write_script_trainer(dir);
  LocalExecutor ex(cpu_slots(3));
  ex.launch({"code3", run_dir(dir, "code3", "exit", 3), trainer, false, 1});
  ex.launch({"term", run_dir(dir, "term", "sleep"), trainer, false, 1});
  ex.launch({"kill", run_dir(dir, "kill", "stubborn"), trainer, false, 1});
  CHECK(ex.running() == 3);
  CHECK_THROWS_AS(ex.launch({"more", run_dir(dir, "more", "exit"), trainer, false, 1}),
                  LaunchError);  // no free slot
  REQUIRE(eventually([&] { return fs::exists(dir.path() / "kill" / "started.txt") &&
                                  fs::exists(dir.path() / "term" / "started.txt"); }));
  ex.request_stop("term");
  ex.request_stop("kill");  // ignores SIGTERM
  ex.kill("kill");
  auto exits = wait_exits(ex, 3);
  REQUIRE(exits.size() == 3);
  std::map<std::string, AttemptExit> by_run;
  for (auto& e : exits) by_run[e.run_id] = e;
  CHECK(by_run["code3"].exit_code == 3);
  CHECK(by_run["code3"].describe() == "exit code 3");
  CHECK(by_run["term"].exit_code == 4);  // it trapped SIGTERM and exited 4, as the trainer does
  CHECK(fs::exists(dir.path() / "term" / "term.txt"));
  CHECK(by_run["kill"].signal == SIGKILL);
  CHECK(by_run["kill"].describe() == "killed by signal 9 (SIGKILL)");
}

TEST_CASE("a trainer that cannot start is a LaunchError and frees its slot") {
  TempDir dir;
  LocalExecutor ex(cpu_slots(1));
  const fs::path d = run_dir(dir, "r", "exit");
  CHECK_THROWS_AS(ex.launch({"r", d, dir.path() / "no-such-trainer", false, 1}), LaunchError);
  CHECK(ex.running() == 0);
  CHECK_THROWS_AS(ex.launch({"r", dir.path() / "missing-dir", write_script_trainer(dir), false, 1}),
                  LaunchError);  // the log files cannot be opened
  CHECK(ex.running() == 0);
}

TEST_CASE("recover stops an orphaned trainer of the run and leaves other processes alone") {
  TempDir dir;
  const fs::path trainer = write_script_trainer(dir);
  const fs::path d = run_dir(dir, "orphan", "stubborn");
  // Started outside any executor: as if the orchestrator that launched it had died.
  Process orphan({trainer.string(), "--run-dir", d.string()}, dir.path());
  REQUIRE(eventually([&] { return fs::exists(d / "started.txt"); }));
  LocalExecutor ex(cpu_slots(1));
  mxablate::results::OpenAttempt a;
  a.run_id = "orphan";
  a.executor = "local";
  a.executor_ref = "pid:" + std::to_string(orphan.pid());
  a.run_dir = d.string();
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_FALSE(ex.recover(a, std::chrono::milliseconds(300)));  // not adoptable: not our child
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  const ProcessResult r = orphan.wait(std::chrono::seconds(5));
  CHECK(r.signal == SIGKILL);  // it ignored SIGTERM, so the grace period ended in SIGKILL

  // A pid whose command line is not this run's (e.g. recycled) is left alone: our own.
  a.executor_ref = "pid:" + std::to_string(::getpid());
  CHECK_FALSE(ex.recover(a, std::chrono::milliseconds(100)));
  a.executor_ref = "garbage";
  CHECK_FALSE(ex.recover(a, std::chrono::milliseconds(100)));
}

TEST_CASE("a run of N ranks takes N slots on N distinct GPUs, its devices listed in slot order") {
  ::unsetenv("OMP_NUM_THREADS");
  TempDir dir;
  const fs::path trainer = write_script_trainer(dir);
  SECTION("--gpus 0,1,2,3: two 2-rank runs at once") {
    LocalExecutor ex(gpu_slots({0, 1, 2, 3}, 1));
    CHECK(ex.max_ranks() == 4);
    CHECK(ex.fits({2, 2}));
    CHECK_FALSE(ex.fits({2, 2, 1}));
    CHECK_FALSE(ex.fits({5}));
    const fs::path a = run_dir(dir, "a", "sleep"), b = run_dir(dir, "b", "sleep");
    LaunchRequest ra{"a", a, trainer, false, 1, 2}, rb{"b", b, trainer, false, 1, 2};
    const Launched la = ex.launch(ra);
    const Launched lb = ex.launch(rb);
    CHECK(la.slot == "gpu0+gpu1");
    CHECK(la.device == "cuda:0+cuda:1");
    CHECK(lb.slot == "gpu2+gpu3");
    CHECK(lb.device == "cuda:2+cuda:3");
    CHECK_FALSE(ex.fits({1}));
    CHECK_THROWS_AS(ex.launch({"c", run_dir(dir, "c", "exit"), trainer, false, 1}), LaunchError);
    REQUIRE(eventually([&] { return fs::exists(a / "started.txt") && fs::exists(b / "started.txt"); }));
    CHECK(contains(read_file(a / "started.txt"), "cuda=0,1 hip=0,1"));
    CHECK(contains(read_file(a / "started.txt"), "slot=gpu0+gpu1"));
    CHECK(contains(read_file(b / "started.txt"), "cuda=2,3 hip=2,3"));
    CHECK(contains(read_file(a / "stdout.log"), "in slot gpu0+gpu1 at "));
    ex.kill("a");
    wait_exits(ex, 1);
    // a's two slots are free again, b's are not
    CHECK(ex.fits({2}));
    CHECK_FALSE(ex.fits({3}));
    ex.kill("b");
    wait_exits(ex, 1);
    CHECK(ex.fits({4}));
  }
  SECTION("--gpus 0,1 --per-gpu 2: two 2-rank runs, never two ranks on one GPU") {
    LocalExecutor ex(gpu_slots({0, 1}, 2));
    CHECK(ex.max_ranks() == 2);  // 4 slots, but only 2 distinct GPUs
    CHECK_FALSE(ex.fits({3}));
    CHECK(ex.fits({2, 2}));
    CHECK_FALSE(ex.fits({2, 2, 1}));
    CHECK_THROWS_WITH(ex.launch({"x", run_dir(dir, "x", "exit"), trainer, false, 1, 3}),
                      "parallel.data 3 needs 3 distinct GPUs, but there are only 2");
    const Launched one = ex.launch({"one", run_dir(dir, "one", "sleep"), trainer, false, 1, 1});
    CHECK(one.slot == "gpu0.0");
    // gpu0.0 is taken: the first free slot of each GPU, in slot order — gpu1.0, then gpu0.1.
    const fs::path two = run_dir(dir, "two", "sleep");
    const Launched l2 = ex.launch({"two", two, trainer, false, 1, 2});
    CHECK(l2.slot == "gpu1.0+gpu0.1");
    CHECK(l2.device == "cuda:1+cuda:0");
    REQUIRE(eventually([&] { return fs::exists(two / "started.txt"); }));
    CHECK(contains(read_file(two / "started.txt"), "cuda=1,0 hip=1,0"));
    // One slot is left (gpu1.1): a 1-rank run fits, a 2-rank run does not.
    CHECK(ex.fits({1}));
    CHECK_FALSE(ex.fits({2}));
    ex.kill("one");
    ex.kill("two");
    wait_exits(ex, 2);
  }
  SECTION("CPU slots: N slots, each rank with one slot's threads") {
    LocalExecutor ex(cpu_slots(3, 6));
    CHECK(ex.max_ranks() == 3);
    const fs::path d = run_dir(dir, "cpu", "exit", 0);
    const Launched l = ex.launch({"cpu", d, trainer, false, 1, 2});
    CHECK(l.slot == "cpu0+cpu1");
    CHECK(l.device == "cpu");
    CHECK(ex.fits({1}));
    CHECK_FALSE(ex.fits({2}));
    wait_exits(ex, 1);
    CHECK(ex.fits({3}));
  }
}

TEST_CASE("combine_slots: labels and devices joined, GPU lists, long labels cut") {
  ::unsetenv("OMP_NUM_THREADS");
  const auto g = gpu_slots({3, 7}, 1);
  const Slot s = combine_slots(g);
  CHECK(s.label == "gpu3+gpu7");
  CHECK(s.device == "cuda:3+cuda:7");
  CHECK(s.env.at("CUDA_VISIBLE_DEVICES") == "3,7");
  CHECK(s.env.at("HIP_VISIBLE_DEVICES") == "3,7");
  CHECK(combine_slots({g[1]}).label == "gpu7");
  const Slot c = combine_slots(cpu_slots(16, 32));
  CHECK(c.label == "cpu0+cpu1+cpu2+…+cpu15 (16 slots)");
  CHECK(c.device == "cpu");
  CHECK(c.env.at("OMP_NUM_THREADS") == "2");  // per rank: 32 cores over 16 slots
  CHECK(c.env.count("CUDA_VISIBLE_DEVICES") == 0);
  CHECK(combine_slots(cpu_slots(8, 8)).label == "cpu0+cpu1+cpu2+cpu3+cpu4+cpu5+cpu6+cpu7");
  CHECK(max_ranks_of(gpu_slots({0, 1, 2}, 3)) == 3);
  CHECK(max_ranks_of(cpu_slots(5, 5)) == 5);
}

TEST_CASE("stop and kill reach a launcher's ranks: they are in its process group") {
  TempDir dir;
  const fs::path trainer = write_script_trainer(dir);
  LocalExecutor ex(cpu_slots(2));
  const fs::path d = run_dir(dir, "ranked", "ranks");
  ex.launch({"ranked", d, trainer, false, 1, 2});
  REQUIRE(eventually([&] { return fs::exists(d / "started.txt"); }));
  const std::vector<int> ranks = rank_pids(d);
  REQUIRE(ranks.size() == 2);
  for (int pid : ranks) CHECK(alive(pid));
  ex.request_stop("ranked");  // SIGTERM to the group: the ranks' shells die of it too
  const auto exits = wait_exits(ex, 1);
  REQUIRE(exits.size() == 1);
  CHECK(exits[0].signal == SIGTERM);
  CHECK(eventually([&] { return !alive(ranks[0]) && !alive(ranks[1]); }, std::chrono::seconds(5)));
}

TEST_CASE("recover stops a launcher's whole process group, and ranks its dead launcher left") {
  TempDir dir;
  const fs::path trainer = write_script_trainer(dir);
  const fs::path d = run_dir(dir, "orphan", "ranks");
  mxablate::results::OpenAttempt a;
  a.run_id = "orphan";
  a.executor = "local";
  a.run_dir = d.string();
  LocalExecutor ex(cpu_slots(1));
  SECTION("the launcher lives: its group is stopped") {
    // setsid: the launcher leads its own process group, as the local executor starts it.
    Process orphan({"/usr/bin/setsid", trainer.string(), "--run-dir", d.string()}, dir.path());
    REQUIRE(eventually([&] { return fs::exists(d / "started.txt"); }));
    const std::vector<int> ranks = rank_pids(d);
    REQUIRE(ranks.size() == 2);
    a.executor_ref = "pid:" + std::to_string(orphan.pid());
    CHECK_FALSE(ex.recover(a, std::chrono::milliseconds(2000)));
    CHECK(orphan.wait(std::chrono::seconds(5)).signal == SIGTERM);
    CHECK(eventually([&] { return !alive(ranks[0]) && !alive(ranks[1]); }, std::chrono::seconds(5)));
  }
  SECTION("the launcher died: its ranks are found by process group and run directory") {
    Process orphan({"/usr/bin/setsid", trainer.string(), "--run-dir", d.string()}, dir.path());
    REQUIRE(eventually([&] { return fs::exists(d / "started.txt"); }));
    const std::vector<int> ranks = rank_pids(d);
    REQUIRE(ranks.size() == 2);
    orphan.signal(SIGKILL);  // the launcher alone
    orphan.wait(std::chrono::seconds(5));
    for (int pid : ranks) CHECK(alive(pid));
    a.executor_ref = "pid:" + std::to_string(orphan.pid());
    CHECK_FALSE(ex.recover(a, std::chrono::milliseconds(2000)));
    CHECK(eventually([&] { return !alive(ranks[0]) && !alive(ranks[1]); }, std::chrono::seconds(5)));
  }
}

TEST_CASE("prestart: one standby per busy slot, on that slot's GPU, the slot passes to it when its "
          "run ends and stays held until release") {
  TempDir dir;
  const fs::path trainer = write_script_trainer(dir);
  LocalExecutor ex(gpu_slots({3, 4}, 1));
  const auto req = [&](const std::string& id, bool resume = false) {
    return LaunchRequest{id, run_dir(dir, id, "sleep"), trainer, resume, 1, 1};
  };
  const auto error_of = [&](const LaunchRequest& r) -> std::string {
    try {
      ex.prestart(r);
    } catch (const LaunchError& e) {
      return e.what();
    }
    return "";
  };
  CHECK_FALSE(ex.standby_room());
  CHECK(error_of(req("early")) == "no busy slot without a standby");
  ex.launch(req("a"));
  REQUIRE(eventually([&] { return fs::exists(dir.path() / "a" / "started.txt"); }));
  CHECK(ex.standby_room());
  CHECK(error_of(req("resumed", true)) == "resumed: only a fresh start of a one-rank run is prestarted");
  const Launched b = ex.prestart(req("b"));
  CHECK(b.slot == "gpu3");  // a's slot, a's GPU
  CHECK(b.device == "cuda:3");
  REQUIRE(eventually([&] { return fs::exists(dir.path() / "b" / "started.txt"); }));
  const std::string started = read_file(dir.path() / "b" / "started.txt");
  CHECK(contains(started, "cuda=3 hip=3"));
  CHECK_FALSE(contains(started, "standby=unset"));
  CHECK(contains(read_file(dir.path() / "b" / "stderr.log"),
                 "=== mxablate: attempt 1 (prestarted) in slot gpu3 at "));
  CHECK_FALSE(ex.standby_room());  // gpu3 has its standby; gpu4 runs nothing
  CHECK(error_of(req("c")) == "no busy slot without a standby");
  CHECK(ex.fits({1}));  // a standby takes no slot of its own
  CHECK(ex.running() == 2);
  CHECK_FALSE(ex.standby_ready("b"));

  ex.request_stop("a");
  const auto exits = wait_exits(ex, 1);
  REQUIRE(exits.size() == 1);
  CHECK(exits[0].run_id == "a");
  CHECK(ex.standby_ready("b"));
  CHECK(ex.fits({1}));
  CHECK_FALSE(ex.fits({1, 1}));  // gpu3 is held for b
  ex.release("b");
  CHECK_FALSE(ex.standby_ready("b"));
  CHECK(ex.standby_room());  // b now runs in gpu3 and may get a standby of its own
  const Launched c = ex.prestart(req("c"));
  CHECK(c.slot == "gpu3");
  REQUIRE(eventually([&] { return fs::exists(dir.path() / "c" / "started.txt"); }));  // trap set
  // Abandoned: it is told to stop and its end comes through collect_exits; nothing is freed
  // that it did not hold.
  ex.abandon("c");
  const auto ended = wait_exits(ex, 1);
  REQUIRE(ended.size() == 1);
  CHECK(ended[0].run_id == "c");
  CHECK(ended[0].exit_code == 4);
  CHECK_FALSE(ex.fits({1, 1}));  // b still runs in gpu3
  ex.kill("b");
  wait_exits(ex, 1);
  CHECK(ex.fits({1, 1}));
  CHECK(ex.running() == 0);
}
