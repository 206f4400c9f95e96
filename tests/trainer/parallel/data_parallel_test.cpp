// Data-parallel runs of mxablate-train on the CPU (Gloo), end to end: the launcher, the ranks,
// the gradient buckets, and what a rank dying or a signal does to the run.
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "catch.h"
#include "run_comparison.h"
#include "run_test_support.h"

using namespace mxablate;
using namespace mxablate::test;
using nlohmann::json;

namespace {




// For every live process whose parent is `parent`: whether it ignores SIGPIPE, from the SigIgn
// mask of /proc/PID/status (bit SIGPIPE - 1).
std::map<pid_t, bool> children_ignoring_sigpipe(pid_t parent) {
  std::map<pid_t, bool> out;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return out;
  while (const dirent* e = ::readdir(proc)) {
    const std::string name = e->d_name;
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream status("/proc/" + name + "/status");
    pid_t ppid = -1;
    uint64_t ignored = 0;
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("PPid:", 0) == 0) ppid = static_cast<pid_t>(std::stol(line.substr(5)));
      if (line.rfind("SigIgn:", 0) == 0) ignored = std::stoull(line.substr(7), nullptr, 16);
    }
    if (ppid == parent) out[static_cast<pid_t>(std::stol(name))] = (ignored >> (SIGPIPE - 1)) & 1u;
  }
  ::closedir(proc);
  return out;
}

// A TCP port nothing listens on right now (the kernel's pick for port 0).
int free_local_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  ::close(fd);
  return ntohs(addr.sin_port);
}


}  // namespace

TEST_CASE("Two Gloo ranks train as one rank with the same micro-batches, bit for bit with one each",
          "[train][parallel]") {
  const std::string one = fresh_run_dir("dp_one_rank");
  const contract::RunConfig c1 = dp_config(1, 256);
  REQUIRE(run_train(one, &c1).exit_code == 0);
  const std::string two = fresh_run_dir("dp_two_ranks");
  const contract::RunConfig c2 = dp_config(2, 256);
  const TrainResult r = run_train(two, &c2);
  if (lacks_gloo(r.output)) MXABLATE_SKIP(kNoGloo);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const Trajectory a = trajectory_of(one), b = trajectory_of(two);
  REQUIRE(a.loss.size() == 12);
  // Each rank's one micro-batch is quantized with the keys of its place in the step (the same
  // SR and rotation bits), and the sum of two gradients commutes: every step equals exactly.
  CHECK(b.loss == a.loss);
  CHECK(b.grad_norm == a.grad_norm);
  REQUIRE(b.evals.size() == a.evals.size());
  for (size_t i = 0; i < a.evals.size(); ++i) {
    CHECK(b.evals[i].first == a.evals[i].first);
    CHECK(within(b.evals[i].second, a.evals[i].second, 1e-12));  // the ranks split the validation set
  }
  const auto events = effective_events(two);
  CHECK(events.front()["ranks"] == 2);
  CHECK(events_of_kind(events, "run_start").size() == 1);  // rank 0 alone writes the log
  CHECK(events_of_kind(events, "run_end").size() == 1);
  CHECK(events_of_kind(events, "quant_stats").size() == events_of_kind(effective_events(one), "quant_stats").size());
}

// One rank sums the four micro-batches' gradients as ((a + b) + c) + d, two ranks as (a + b) +
// (c + d): the same terms in another order, so the runs are compared one update apart
// (run_comparison.h says why not over a whole run).
TEST_CASE("Two ranks with two micro-batches each take one rank's steps with four, up to the order of the sums",
          "[train][parallel]") {
  contract::RunConfig c1 = dp_config(1, 128);
  c1.train.max_tokens = c1.train.global_batch_tokens * 3;
  const std::string one = fresh_run_dir("dp_one_rank_four");
  REQUIRE(run_train(one, &c1).exit_code == 0);
  const std::string two = fresh_run_dir("dp_two_ranks_four");
  contract::RunConfig c2 = dp_config(2, 128);
  c2.train.max_tokens = c2.train.global_batch_tokens * 3;
  const TrainResult r = run_train(two, &c2);
  if (lacks_gloo(r.output)) MXABLATE_SKIP(kNoGloo);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  check_one_update_apart(trajectory_of(two), trajectory_of(one), 1);
}

TEST_CASE("A rank that dies takes the run down, and --resume continues from rank 0's checkpoint",
          "[train][parallel]") {
  const contract::RunConfig c = dp_config(2, 256);
  const std::string reference = fresh_run_dir("dp_reference");
  const TrainResult first = run_train(reference, &c);
  if (lacks_gloo(first.output)) MXABLATE_SKIP(kNoGloo);
  REQUIRE(first.exit_code == 0);

  const std::string dir = fresh_run_dir("dp_rank_dies");
  const TrainResult crashed = run_train(dir, &c, "--debug-crash-at-step 7 --debug-fault-rank 1");
  INFO(crashed.output);
  CHECK(crashed.exit_code == 137);  // rank 1's kill -9, as the run's
  CHECK(crashed.output.find("rank 1 ended with exit code 137; stopping the other ranks") != std::string::npos);
  // Rank 0 lost its peer inside a collective: the run was interrupted, not failed, so no
  // run_end (the orchestrator retries it as it retries a killed trainer).
  CHECK(crashed.output.find("lost the other ranks (one of them ended or crashed)") != std::string::npos);
  CHECK(events_of_kind(effective_events(dir), "run_end").empty());

  const TrainResult resumed = run_train(dir, nullptr, "--resume");
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  const auto events = effective_events(dir);
  const auto resume = events_of_kind(events, "resume");
  REQUIRE(resume.size() == 1);
  CHECK(resume[0]["step"] == 5);  // the checkpoint before the crash
  // The resumed timeline is the uninterrupted run's.
  CHECK(trajectory_of(dir).evals == trajectory_of(reference).evals);
  CHECK(trajectory_of(dir).loss == trajectory_of(reference).loss);
}

TEST_CASE("A signal reaching one rank stops every rank at the same step with a checkpoint",
          "[train][parallel]") {
  const contract::RunConfig c = dp_config(2, 256);
  const std::string dir = fresh_run_dir("dp_signal");
  const TrainResult stopped = run_train(dir, &c, "--debug-signal-at-step 3 --debug-fault-rank 1");
  if (lacks_gloo(stopped.output)) MXABLATE_SKIP(kNoGloo);
  INFO(stopped.output);
  CHECK(stopped.exit_code == 4);
  const auto events = effective_events(dir);
  const auto end = events_of_kind(events, "run_end");
  REQUIRE(end.size() == 1);
  CHECK(end[0]["status"] == "interrupted");
  // Rank 1 saw SIGTERM after step 3's exchange; the ranks agreed at step 4's.
  CHECK(end[0]["step"] == 4);
  REQUIRE_FALSE(events_of_kind(events, "checkpoint").empty());
  CHECK(events_of_kind(events, "checkpoint").back()["step"] == 4);
  REQUIRE(run_train(dir, nullptr, "--resume").exit_code == 0);
  CHECK(events_of_kind(effective_events(dir), "run_end").back()["status"] == "budget_exhausted");
}

TEST_CASE("A rank's environment is checked against parallel.data, one line naming what is wrong",
          "[train][parallel]") {
  const contract::RunConfig c = dp_config(2, 256);
  struct Env {
    Env(const char* world, const char* rank) {
      ::setenv("WORLD_SIZE", world, 1);
      ::setenv("RANK", rank, 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", "1", 1);
    }
    ~Env() {
      for (const char* v : {"WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT"}) ::unsetenv(v);
    }
  };
  {
    Env env("3", "0");
    const TrainResult r = run_train(fresh_run_dir("dp_wrong_world"), &c);
    CHECK(r.exit_code == 2);
    CHECK(r.output.find("parallel.data: 2 but this process is rank 0 of 3") != std::string::npos);
  }
  {
    Env env("two", "0");
    const TrainResult r = run_train(fresh_run_dir("dp_bad_world"), &c);
    CHECK(r.exit_code == 2);
    CHECK(r.output.find("environment WORLD_SIZE: expected an integer in [1, 4096], got \"two\"") !=
          std::string::npos);
  }
  {
    Env env("2", "5");
    const TrainResult r = run_train(fresh_run_dir("dp_bad_rank"), &c);
    CHECK(r.exit_code == 2);
    CHECK(r.output.find("environment RANK: expected an integer in [0, 1]") != std::string::npos);
  }
}

TEST_CASE("Ranks started by another tool (srun, torchrun) meet through rank 0's store", "[train][parallel]") {
  const contract::RunConfig c = dp_config(2, 256);
  const std::string reference = fresh_run_dir("dp_by_launcher");
  const TrainResult first = run_train(reference, &c);
  if (lacks_gloo(first.output)) MXABLATE_SKIP(kNoGloo);
  REQUIRE(first.exit_code == 0);

  const std::string dir = fresh_run_dir("dp_by_hand");
  contract::write_run_config(dir + "/config.json", c);
  const int port = free_local_port();
  std::vector<int> codes(2, -1);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      // As srun sets them for two tasks, with the address exported by the job script.
      const std::string cmd = "env -u RANK -u WORLD_SIZE SLURM_NTASKS=2 SLURM_PROCID=" + std::to_string(r) +
                              " SLURM_LOCALID=" + std::to_string(r) + " MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
                              std::to_string(port) + " '" + MXABLATE_TRAIN_EXE + "' --run-dir '" + dir +
                              "' > '" + dir + "/rank" + std::to_string(r) + ".txt' 2>&1";
      const int status = std::system(cmd.c_str());
      codes[static_cast<size_t>(r)] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    });
  for (auto& t : ranks) t.join();
  CHECK(codes == std::vector<int>{0, 0});
  CHECK(trajectory_of(dir).loss == trajectory_of(reference).loss);
  CHECK(effective_events(dir).front()["ranks"] == 2);
}

TEST_CASE("A one-rank run inside a multi-task Slurm allocation trains as one rank", "[train][parallel]") {
  contract::RunConfig c = dp_config(1, 256);
  c.train.max_tokens = 512 * 2;
  ::setenv("SLURM_NTASKS", "4", 1);
  ::setenv("SLURM_PROCID", "2", 1);
  const TrainResult r = run_train(fresh_run_dir("dp_salloc_one_rank"), &c);
  ::unsetenv("SLURM_NTASKS");
  ::unsetenv("SLURM_PROCID");
  INFO(r.output);
  CHECK(r.exit_code == 0);
}

TEST_CASE("SIGTERM to the launcher (what the orchestrator's stop sends) reaches every rank: all checkpoint and stop",
          "[train][parallel]") {
  contract::RunConfig c = dp_config(2, 256);
  c.train.max_tokens = 512 * 400;  // long enough to be stopped midway
  const std::string dir = fresh_run_dir("dp_launcher_sigterm");
  contract::write_run_config(dir + "/config.json", c);
  // Start the launcher, wait for its first checkpoint (step 5), send it SIGTERM, keep its code.
  const std::string script =
      "'" + std::string(MXABLATE_TRAIN_EXE) + "' --run-dir '" + dir + "' > '" + dir +
      "/out.txt' 2>&1 & pid=$!; for i in $(seq 600); do grep -q '\"checkpoint\"' '" + dir +
      "/events.jsonl' 2>/dev/null && break; kill -0 $pid 2>/dev/null || break; sleep 0.1; done; "
      "kill -TERM $pid; wait $pid; echo $? > '" + dir + "/code.txt'";
  const std::string path = dir + "/stop.sh";
  {
    std::ofstream(path) << script << "\n";
  }
  REQUIRE(std::system(("bash '" + path + "'").c_str()) == 0);
  std::ifstream code_in(dir + "/code.txt"), out_in(dir + "/out.txt");
  int code = -1;
  code_in >> code;
  const std::string output((std::istreambuf_iterator<char>(out_in)), std::istreambuf_iterator<char>());
  INFO(output);
  if (lacks_gloo(output)) MXABLATE_SKIP(kNoGloo);
  CHECK(code == 4);  // interrupted, checkpointed: every rank agreed
  const auto events = effective_events(dir);
  const auto end = events_of_kind(events, "run_end");
  REQUIRE(end.size() == 1);
  CHECK(end[0]["status"] == "interrupted");
  CHECK(end[0]["step"].get<int64_t>() < 400);
  CHECK(events_of_kind(events, "checkpoint").back()["step"] == end[0]["step"]);
}

TEST_CASE("Every rank of a data-parallel run ignores SIGPIPE, so a peer's death is an error, not a signal",
          "[train][parallel]") {
  // The launcher names a rank killed by a signal as the cause of a failure. A rank writing to a
  // dead peer's socket must therefore get an error, not die of SIGPIPE itself: that once made a
  // rank's SIGPIPE (141) the reported cause of its peer's kill -9 (docs/design.md §4,
  // "Data-parallel runs"). Read from /proc while the run goes, then the run is stopped.
  const contract::RunConfig c = dp_config(2, 256);
  const std::string dir = fresh_run_dir("dp_sigpipe");
  contract::write_run_config(dir + "/config.json", c);
  const std::string out = dir + "/train-output.txt";
  const pid_t launcher = ::fork();
  REQUIRE(launcher >= 0);
  if (launcher == 0) {
    const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::execl(MXABLATE_TRAIN_EXE, MXABLATE_TRAIN_EXE, "--run-dir", dir.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Until both ranks ignore it, or the run ends (a rank reads its config before it sets it).
  std::map<pid_t, bool> ranks;
  bool ended = false;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!ended && std::chrono::steady_clock::now() < give_up) {
    for (const auto& [pid, ignores] : children_ignoring_sigpipe(launcher)) ranks[pid] = ignores;
    if (ranks.size() == 2 && ranks.begin()->second && ranks.rbegin()->second) break;
    int status = 0;
    ended = ::waitpid(launcher, &status, WNOHANG) == launcher;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!ended) {
    ::kill(launcher, SIGTERM);  // forwarded to the ranks: the run stops at its next step
    int status = 0;
    ::waitpid(launcher, &status, 0);
  }
  std::ifstream in(out);
  const std::string output((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (lacks_gloo(output)) MXABLATE_SKIP(kNoGloo);
  INFO(output);
  REQUIRE(ranks.size() == 2);
  for (const auto& [pid, ignores] : ranks) {
    INFO("rank process " << pid);
    CHECK(ignores);
  }
}
