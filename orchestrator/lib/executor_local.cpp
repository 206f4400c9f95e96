#include "mxablate/orchestrator/executor_local.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fmt/format.h>
#include <fstream>
#include <sstream>
#include <thread>

#include "mxablate/orchestrator/boost_process.h"
#include "mxablate/results/store.h"

namespace mxablate::orchestrator {
namespace {

std::string timestamp() {
  const std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", std::localtime(&now));
  return buf;
}

// A child that should start in its own process group and die with us.
struct ChildSetup {
  pid_t parent;
  template <typename Exec>
  void operator()(Exec&) const {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(127);  // the orchestrator died before prctl took effect
    // Dispositions the orchestrator changed must not leak into the trainer (ignored signals
    // survive exec).
    ::signal(SIGPIPE, SIG_DFL);
    ::signal(SIGXFSZ, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
  }
};

// Whether /proc/<pid> is a live (non-zombie) process whose command line mentions `needle`.
bool process_runs_with(int pid, const std::string& needle) {
  std::ifstream cmd(fmt::format("/proc/{}/cmdline", pid), std::ios::binary);
  if (!cmd) return false;
  std::string args((std::istreambuf_iterator<char>(cmd)), std::istreambuf_iterator<char>());
  for (char& c : args)
    if (c == '\0') c = ' ';
  if (args.find(needle) == std::string::npos) return false;
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string line;
  std::getline(stat, line);
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] != 'Z';
}

}  // namespace

std::string local_host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

std::vector<Slot> cpu_slots(int count, unsigned cores) {
  if (cores == 0) cores = std::max(1u, std::thread::hardware_concurrency());
  std::map<std::string, std::string> env;
  if (const char* set = std::getenv("OMP_NUM_THREADS"); !set || !*set)
    env["OMP_NUM_THREADS"] = std::to_string(std::max(1u, cores / static_cast<unsigned>(count)));
  std::vector<Slot> slots;
  for (int i = 0; i < count; ++i) slots.push_back({fmt::format("cpu{}", i), "cpu", env});
  return slots;
}

std::vector<Slot> gpu_slots(const std::vector<int>& gpus, int per_gpu) {
  std::vector<Slot> slots;
  for (int k = 0; k < per_gpu; ++k)  // interleaved: the first runs spread over all GPUs
    for (int g : gpus) {
      const std::string id = std::to_string(g);
      slots.push_back({per_gpu > 1 ? fmt::format("gpu{}.{}", g, k) : fmt::format("gpu{}", g),
                       fmt::format("cuda:{}", g),
                       {{"CUDA_VISIBLE_DEVICES", id}, {"HIP_VISIBLE_DEVICES", id}}});
    }
  return slots;
}

struct LocalExecutor::Child {
  std::string run_id;
  size_t slot = 0;
  int pid = 0;
  bp::child process;
};

LocalExecutor::LocalExecutor(std::vector<Slot> slots)
    : slots_(std::move(slots)), busy_(slots_.size(), false), host_(local_host_name()) {}

LocalExecutor::~LocalExecutor() {
  for (auto& [run_id, child] : children_) {
    ::kill(-child->pid, SIGKILL);
    ::kill(child->pid, SIGKILL);
    std::error_code ec;
    child->process.wait(ec);
  }
}

Launched LocalExecutor::launch(const LaunchRequest& r) {
  size_t slot = slots_.size();
  for (size_t i = 0; i < slots_.size(); ++i)
    if (!busy_[i]) {
      slot = i;
      break;
    }
  if (slot == slots_.size()) throw LaunchError("no free slot");
  if (children_.count(r.run_id)) throw LaunchError(r.run_id + " is already running");

  const auto open_log = [&](const char* name) {
    const std::filesystem::path path = r.run_dir / name;
    std::FILE* f = std::fopen(path.c_str(), "ae");
    if (!f)
      throw LaunchError(fmt::format("cannot open {} for appending: {}", path.string(),
                                    std::strerror(errno)));
    std::fprintf(f, "=== mxablate: attempt %d%s in slot %s at %s ===\n", r.attempt,
                 r.resume ? " (resume)" : "", slots_[slot].label.c_str(), timestamp().c_str());
    std::fflush(f);
    return f;
  };
  std::FILE* out = open_log("stdout.log");
  std::FILE* err = nullptr;
  try {
    err = open_log("stderr.log");
  } catch (...) {
    std::fclose(out);
    throw;
  }

  bp::environment env = boost::this_process::environment();
  for (const auto& [k, v] : slots_[slot].env) env[k] = v;
  env["MXABLATE_ATTEMPT"] = std::to_string(r.attempt);
  env["MXABLATE_SLOT"] = slots_[slot].label;
  std::vector<std::string> args{"--run-dir", r.run_dir.string()};
  if (r.resume) args.push_back("--resume");

  auto child = std::make_unique<Child>();
  child->run_id = r.run_id;
  child->slot = slot;
  try {
    child->process = bp::child(r.trainer.string(), bp::args(args), env, bp::std_in < bp::null,
                               bp::std_out > out, bp::std_err > err,
                               bp::extend::on_exec_setup(ChildSetup{::getpid()}));
  } catch (const std::exception& e) {
    std::fclose(out);
    std::fclose(err);
    throw LaunchError(fmt::format("cannot start {}: {}", r.trainer.string(), e.what()));
  }
  std::fclose(out);  // the child holds its own descriptors now
  std::fclose(err);
  child->pid = child->process.id();
  ::setpgid(child->pid, child->pid);  // also from this side: no window where a signal misses
  busy_[slot] = true;
  Launched launched{fmt::format("pid:{}", child->pid), slots_[slot].label, host_,
                    slots_[slot].device};
  children_[r.run_id] = std::move(child);
  return launched;
}

std::vector<AttemptExit> LocalExecutor::collect_exits() {
  std::vector<AttemptExit> exits;
  for (auto it = children_.begin(); it != children_.end();) {
    Child& c = *it->second;
    std::error_code ec;
    if (c.process.running(ec) && !ec) {
      ++it;
      continue;
    }
    AttemptExit e;
    e.run_id = c.run_id;
    const int status = c.process.native_exit_code();
    if (WIFSIGNALED(status)) {
      e.signal = WTERMSIG(status);
    } else if (WIFEXITED(status)) {
      e.exit_code = WEXITSTATUS(status);
    }
    // The trainer's own children (if any) must not outlive it in our slot.
    ::kill(-c.pid, SIGKILL);
    busy_[c.slot] = false;
    exits.push_back(std::move(e));
    it = children_.erase(it);
  }
  return exits;
}

void LocalExecutor::signal_child(const std::string& run_id, int sig) {
  const auto it = children_.find(run_id);
  if (it == children_.end()) return;
  if (::kill(-it->second->pid, sig) != 0) ::kill(it->second->pid, sig);
}

void LocalExecutor::request_stop(const std::string& run_id) { signal_child(run_id, SIGTERM); }
void LocalExecutor::kill(const std::string& run_id) { signal_child(run_id, SIGKILL); }

std::optional<int> LocalExecutor::pid_of(const std::string& run_id) const {
  const auto it = children_.find(run_id);
  if (it == children_.end()) return std::nullopt;
  return it->second->pid;
}

bool LocalExecutor::recover(const results::OpenAttempt& a, std::chrono::milliseconds grace) {
  // A local process is not our child any more: it cannot be adopted (no exit status would ever
  // reach us), only made sure of. The pid is checked against the run directory in its command
  // line, so a recycled pid is left alone.
  int pid = 0;
  if (std::sscanf(a.executor_ref.c_str(), "pid:%d", &pid) != 1 || pid <= 0) return false;
  if (!process_runs_with(pid, a.run_dir)) return false;
  ::kill(pid, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (process_runs_with(pid, a.run_dir)) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      for (int i = 0; i < 100 && process_runs_with(pid, a.run_dir); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

}  // namespace mxablate::orchestrator
