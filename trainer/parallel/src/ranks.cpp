#include "mxablate/trainer/parallel/ranks.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <thread>

#include "c10d_compat.h"
#include "mxablate/contract/run_config.h"
#include "mxablate/trainer/rules/stop_signals.h"

extern char** environ;

namespace mxablate::trainer {
namespace {

using contract::ConfigError;

// How long ranks that outlive a failed peer get to stop on SIGTERM before SIGKILL: a rank
// blocked in a collective with the dead peer never reaches its next step boundary.
constexpr auto kStopGrace = std::chrono::seconds(3);

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

int env_int(const char* name, int lowest, int highest) {
  const std::string v = env(name).value_or("");
  int out = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || end != v.data() + v.size() || out < lowest || out > highest)
    throw ConfigError("environment " + std::string(name) + ": expected an integer in [" +
                      std::to_string(lowest) + ", " + std::to_string(highest) + "], got \"" + v + "\"");
  return out;
}

// "NAME=value" strings for execve, built before fork (nothing after fork may allocate).
std::vector<std::string> rank_environment(int rank, int world, int port) {
  const std::vector<std::string> ours = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                         "MASTER_PORT", "MXABLATE_STORE_HOSTED"};
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const auto& o : ours) replaced = replaced || name == o;
    if (!replaced) out.push_back(entry);
  }
  out.push_back("RANK=" + std::to_string(rank));
  out.push_back("WORLD_SIZE=" + std::to_string(world));
  out.push_back("LOCAL_RANK=" + std::to_string(rank));
  out.push_back("MASTER_ADDR=127.0.0.1");
  out.push_back("MASTER_PORT=" + std::to_string(port));
  out.push_back("MXABLATE_STORE_HOSTED=1");
  return out;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace

std::optional<RankInfo> rank_from_environment(int ranks) {
  RankInfo r;
  if (env("RANK") || env("WORLD_SIZE")) {
    r.world = env_int("WORLD_SIZE", 1, 4096);
    r.rank = env_int("RANK", 0, r.world - 1);
    r.local_rank = env("LOCAL_RANK") ? env_int("LOCAL_RANK", 0, 4095) : r.rank;
  } else if (ranks > 1 && env("SLURM_NTASKS") && env_int("SLURM_NTASKS", 1, 1 << 20) > 1) {
    r.world = env_int("SLURM_NTASKS", 1, 4096);
    r.rank = env_int("SLURM_PROCID", 0, r.world - 1);
    r.local_rank = env_int("SLURM_LOCALID", 0, 4095);
  } else {
    return std::nullopt;
  }
  const auto host = env("MASTER_ADDR");
  if (!host) throw ConfigError("environment MASTER_ADDR: needed by a rank (the host of rank 0's store)");
  r.store_host = *host;
  r.store_port = env_int("MASTER_PORT", 1, 65535);
  r.hosts_store = r.rank == 0 && !env("MXABLATE_STORE_HOSTED") &&
                  env("TORCHELASTIC_USE_AGENT_STORE").value_or("") != "True";
  return r;
}

int launch_ranks(int world, const std::vector<std::string>& arguments) {
  // The store outlives the ranks; port 0 lets the kernel pick a free one (no race with other
  // runs starting on this machine).
  c10d::TCPStoreOptions options;
  options.port = 0;
  options.isServer = true;
  options.waitWorkers = false;
  const auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);
  const int port = store->getPort();

  install_stop_signal_handlers();
  std::vector<std::string> argv_strings = {"/proc/self/exe"};
  argv_strings.insert(argv_strings.end(), arguments.begin(), arguments.end());
  std::vector<char*> argv = c_strings(argv_strings);
  const pid_t launcher = ::getpid();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world; ++rank) {
    std::vector<std::string> env_strings = rank_environment(rank, world, port);
    std::vector<char*> envp = c_strings(env_strings);
    const pid_t pid = ::fork();
    if (pid < 0) {
      std::cerr << "mxablate-train: cannot start rank " << rank << ": " << std::strerror(errno) << "\n";
      for (pid_t p : pids) ::kill(p, SIGKILL);
      for (pid_t p : pids) ::waitpid(p, nullptr, 0);
      return 1;
    }
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // a launcher killed outright takes its ranks along
      if (::getppid() != launcher) ::_exit(137);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::execve("/proc/self/exe", argv.data(), envp.data());
      ::_exit(127);
    }
    pids.push_back(pid);
  }

  std::vector<bool> running(pids.size(), true);
  std::optional<int> failure;  // the first rank's failure: the run's exit code
  std::optional<int> common;   // the code every rank exited with, while they agree
  bool codes_agree = true;
  int forwarded = 0;
  std::optional<std::chrono::steady_clock::time_point> kill_at;
  size_t left = pids.size();
  while (left > 0) {
    if (const int sig = stop_signal_received(); sig != 0 && forwarded == 0) {
      forwarded = sig;
      for (size_t i = 0; i < pids.size(); ++i)
        if (running[i]) ::kill(pids[i], sig);
    }
    // Every rank that ended since the last look. When a rank dies its peers follow it within
    // moments (a collective fails): the first failure is the one to report, and of those
    // reaped together a rank killed by a signal is the cause, the others' errors its effect.
    std::vector<std::pair<size_t, int>> ended;  // (rank, status)
    for (int status = 0;;) {
      const pid_t done = ::waitpid(-1, &status, WNOHANG);
      if (done <= 0) break;
      for (size_t i = 0; i < pids.size(); ++i)
        if (pids[i] == done && running[i]) ended.emplace_back(i, status);
    }
    std::stable_partition(ended.begin(), ended.end(),
                          [](const auto& e) { return WIFSIGNALED(e.second); });
    for (const auto& [i, status] : ended) {
      running[i] = false;
      --left;
      const int code = exit_code_of(status);
      if (!failure && !kill_at) {
        if (common && *common != code) codes_agree = false;
        common = code;
      }
      // A rank that failed while its peers run: they would wait for it in their next
      // collective; stop them (they are killed after a grace period).
      if (code != 0 && !failure && !kill_at) {
        const bool stopping_together = forwarded != 0 && code == 4;  // interrupted: all will
        if (!stopping_together) {
          failure = code;
          if (left > 0) {
            std::cerr << "mxablate-train: rank " << i << " ended with exit code " << code
                      << "; stopping the other ranks\n";
            for (size_t j = 0; j < pids.size(); ++j)
              if (running[j]) ::kill(pids[j], SIGTERM);
            kill_at = std::chrono::steady_clock::now() + kStopGrace;
          }
        }
      }
    }
    if (!ended.empty()) continue;
    if (kill_at && std::chrono::steady_clock::now() >= *kill_at) {
      for (size_t i = 0; i < pids.size(); ++i)
        if (running[i]) ::kill(pids[i], SIGKILL);
      kill_at = std::chrono::steady_clock::time_point::max();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (failure) return *failure;
  if (!codes_agree) {
    std::cerr << "mxablate-train: the ranks ended with different exit codes\n";
    return 1;
  }
  return common.value_or(1);
}

}  // namespace mxablate::trainer
