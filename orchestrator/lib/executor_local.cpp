#include "mxablate/orchestrator/executor_local.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <fmt/format.h>
#include <fstream>
#include <sstream>
#include <thread>

#include "mxablate/contract/standby.h"
#include "mxablate/orchestrator/boost_process.h"
#include "mxablate/results/store.h"

namespace mxablate::orchestrator {
namespace {

// A child that should start in its own process group and die with us.
struct ChildSetup {
  pid_t parent;
  int inherit_fd = -1;  // a standby's end of its descriptor: kept open across exec
  template <typename Exec>
  void operator()(Exec&) const {
    if (inherit_fd >= 0) ::fcntl(inherit_fd, F_SETFD, 0);
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

// The process group of `pid` (0 when it cannot be read).
int process_group(int pid) {
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string line;
  std::getline(stat, line);
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos) return 0;
  std::istringstream rest(line.substr(paren + 1));
  std::string state;
  int ppid = 0, pgrp = 0;
  rest >> state >> ppid >> pgrp;
  return rest ? pgrp : 0;
}

// Live processes of process group `pgid`; with a `needle`, only those whose command line
// mentions it.
std::vector<int> group_members(int pgid, const std::string* needle) {
  std::vector<int> pids;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    int pid = 0;
    try {
      pid = std::stoi(name);
    } catch (const std::exception&) {
      continue;
    }
    if (process_group(pid) != pgid) continue;
    if (process_runs_with(pid, needle ? *needle : std::string())) pids.push_back(pid);
  }
  return pids;
}

std::string join(const std::vector<std::string>& parts, const char* sep) {
  std::string s;
  for (const std::string& p : parts) s += (s.empty() ? "" : sep) + p;
  return s;
}

}  // namespace

Slot combine_slots(const std::vector<Slot>& parts) {
  if (parts.empty()) return {};
  if (parts.size() == 1) return parts.front();
  std::vector<std::string> labels, devices, gpus;
  for (const Slot& p : parts) {
    labels.push_back(p.label);
    devices.push_back(p.device);
    if (p.gpu) gpus.push_back(std::to_string(*p.gpu));
  }
  Slot s;
  // A label stays short enough to read in a table and an environment variable, however many
  // ranks: the first three and the last slot, and how many there are.
  constexpr size_t kShown = 8;
  s.label = labels.size() <= kShown
                ? join(labels, "+")
                : fmt::format("{}+{}+{}+…+{} ({} slots)", labels[0], labels[1], labels[2],
                              labels.back(), labels.size());
  // One device per rank, in rank order ("cuda:0+cuda:1"); ranks on the CPU share one device
  // name, said once.
  s.device = std::all_of(devices.begin(), devices.end(),
                         [&](const std::string& d) { return d == devices.front(); })
                 ? devices.front()
                 : join(devices, "+");
  s.env = parts.front().env;
  if (!gpus.empty()) {
    s.env["CUDA_VISIBLE_DEVICES"] = join(gpus, ",");
    s.env["HIP_VISIBLE_DEVICES"] = join(gpus, ",");
  }
  return s;
}

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
  for (int i = 0; i < count; ++i) slots.push_back({fmt::format("cpu{}", i), "cpu", env, std::nullopt});
  return slots;
}

std::vector<Slot> gpu_slots(const std::vector<int>& gpus, int per_gpu) {
  std::vector<Slot> slots;
  for (int k = 0; k < per_gpu; ++k)  // interleaved: the first runs spread over all GPUs
    for (int g : gpus) {
      const std::string id = std::to_string(g);
      slots.push_back({per_gpu > 1 ? fmt::format("gpu{}.{}", g, k) : fmt::format("gpu{}", g),
                       fmt::format("cuda:{}", g),
                       {{"CUDA_VISIBLE_DEVICES", id}, {"HIP_VISIBLE_DEVICES", id}},
                       g});
    }
  return slots;
}

struct LocalExecutor::Child {
  std::string run_id;
  std::vector<size_t> slots;  // held (busy_); a standby holds its slot only once it has freed
  // Slots handed over to their standbys while this process still tears down (hand_over): no
  // further standby is started on them until it has exited (its device memory is freed).
  std::vector<size_t> leaving;
  int pid = 0;
  bp::child process;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  // A standby: the slot it waits for, and our end of its descriptor (-1 once closed).
  std::optional<size_t> standby_for;
  int go_fd = -1;
  void close_go() {
    if (go_fd >= 0) ::close(go_fd);
    go_fd = -1;
  }
};

LocalExecutor::LocalExecutor(std::vector<Slot> slots)
    : slots_(std::move(slots)), busy_(slots_.size(), false), standby_on_(slots_.size()),
      host_(local_host_name()) {}

LocalExecutor::~LocalExecutor() {
  for (auto& [run_id, child] : children_) {
    child->close_go();
    ::kill(-child->pid, SIGKILL);
    ::kill(child->pid, SIGKILL);
    std::error_code ec;
    child->process.wait(ec);
  }
}

std::vector<size_t> LocalExecutor::pick_slots(std::vector<bool>& busy, int ranks) const {
  // The first free slots in slot order, one per GPU: it fits exactly when at least `ranks`
  // GPUs have a free slot (CPU slots: when `ranks` slots are free).
  std::vector<size_t> picked;
  std::vector<int> gpus;
  for (size_t i = 0; i < slots_.size() && picked.size() < static_cast<size_t>(std::max(ranks, 1));
       ++i) {
    if (busy[i]) continue;
    if (const auto& g = slots_[i].gpu) {
      if (std::find(gpus.begin(), gpus.end(), *g) != gpus.end()) continue;
      gpus.push_back(*g);
    }
    picked.push_back(i);
  }
  if (picked.size() < static_cast<size_t>(std::max(ranks, 1))) return {};
  for (size_t i : picked) busy[i] = true;
  return picked;
}

bool LocalExecutor::fits(const std::vector<int>& ranks) const {
  std::vector<bool> busy = busy_;
  for (int n : ranks)
    if (pick_slots(busy, n).empty()) return false;
  return true;
}

int max_ranks_of(const std::vector<Slot>& slots) {
  std::vector<int> gpus;
  for (const Slot& s : slots)
    if (s.gpu && std::find(gpus.begin(), gpus.end(), *s.gpu) == gpus.end()) gpus.push_back(*s.gpu);
  return gpus.empty() ? static_cast<int>(slots.size()) : static_cast<int>(gpus.size());
}

int LocalExecutor::max_ranks() const { return max_ranks_of(slots_); }

Launched LocalExecutor::launch(const LaunchRequest& r) {
  if (children_.count(r.run_id)) throw LaunchError(r.run_id + " is already running");
  const bool on_gpus =
      std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return s.gpu.has_value(); });
  if (r.ranks > max_ranks())
    throw LaunchError(fmt::format("parallel.data {} needs {} {}, but there are only {}", r.ranks,
                                  r.ranks, on_gpus ? "distinct GPUs" : "slots", max_ranks()));
  std::vector<bool> busy = busy_;
  const std::vector<size_t> taken = pick_slots(busy, r.ranks);
  if (taken.empty())
    throw LaunchError(r.ranks > 1 ? fmt::format("no {} free slots{}", r.ranks,
                                                on_gpus ? " on distinct GPUs" : "")
                                  : std::string("no free slot"));
  std::vector<Slot> parts;
  for (size_t i : taken) parts.push_back(slots_[i]);
  auto child = spawn(r, combine_slots(parts), -1);
  child->slots = taken;
  busy_ = std::move(busy);
  return record(std::move(child), combine_slots(parts));
}

Launched LocalExecutor::record(std::unique_ptr<Child> child, const Slot& slot) {
  Launched launched{fmt::format("pid:{}", child->pid), slot.label, host_, slot.device};
  children_[child->run_id] = std::move(child);
  return launched;
}

std::unique_ptr<LocalExecutor::Child> LocalExecutor::spawn(const LaunchRequest& r, const Slot& slot,
                                                           int standby_fd) {
  const auto open_log = [&](const char* name) {
    const std::filesystem::path path = r.run_dir / name;
    std::FILE* f = std::fopen(path.c_str(), "ae");
    if (!f)
      throw LaunchError(fmt::format("cannot open {} for appending: {}", path.string(),
                                    std::strerror(errno)));
    std::fprintf(f, "=== mxablate: attempt %d%s%s in slot %s at %s ===\n", r.attempt,
                 r.resume ? " (resume)" : "", standby_fd >= 0 ? " (prestarted)" : "",
                 slot.label.c_str(), executor_timestamp().c_str());
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
  for (const auto& [k, v] : slot.env) env[k] = v;
  env["MXABLATE_ATTEMPT"] = std::to_string(r.attempt);
  env["MXABLATE_SLOT"] = slot.label;
  if (standby_fd >= 0) env[contract::kStandbyFdEnv] = std::to_string(standby_fd);
  else if (env.find(contract::kStandbyFdEnv) != env.end()) env.erase(contract::kStandbyFdEnv);
  std::vector<std::string> args{"--run-dir", r.run_dir.string()};
  if (r.resume) args.push_back("--resume");

  auto child = std::make_unique<Child>();
  child->run_id = r.run_id;
  try {
    child->process = bp::child(r.trainer.string(), bp::args(args), env, bp::std_in < bp::null,
                               bp::std_out > out, bp::std_err > err,
                               bp::extend::on_exec_setup(ChildSetup{::getpid(), standby_fd}));
  } catch (const std::exception& e) {
    std::fclose(out);
    std::fclose(err);
    throw LaunchError(fmt::format("cannot start {}: {}", r.trainer.string(), e.what()));
  }
  std::fclose(out);  // the child holds its own descriptors now
  std::fclose(err);
  child->pid = child->process.id();
  ::setpgid(child->pid, child->pid);  // also from this side: no window where a signal misses
  return child;
}

std::optional<size_t> LocalExecutor::standby_slot() const {
  // The busy slot without a standby whose trainer started first (the likeliest to end first).
  std::optional<size_t> best;
  std::chrono::steady_clock::time_point best_start{};
  const auto leaving = [&](size_t slot) {
    return std::any_of(children_.begin(), children_.end(), [&](const auto& kv) {
      const std::vector<size_t>& l = kv.second->leaving;
      return std::find(l.begin(), l.end(), slot) != l.end();
    });
  };
  for (const auto& [run_id, c] : children_) {
    if (c->standby_for) continue;
    for (size_t i : c->slots)
      if (standby_on_[i].empty() && !leaving(i) && (!best || c->started < best_start)) {
        best = i;
        best_start = c->started;
      }
  }
  return best;
}

bool LocalExecutor::standby_room() const { return standby_slot().has_value(); }

Launched LocalExecutor::prestart(const LaunchRequest& r) {
  if (!prestartable(r))
    throw LaunchError(r.run_id + ": only a fresh start of a one-rank run is prestarted");
  if (children_.count(r.run_id)) throw LaunchError(r.run_id + " is already running");
  const std::optional<size_t> slot = standby_slot();
  if (!slot) throw LaunchError("no busy slot without a standby");
  int fds[2] = {-1, -1};  // [0]: ours (the go byte), [1]: the trainer's
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
    throw LaunchError(fmt::format("cannot create the standby descriptor: {}", std::strerror(errno)));
  std::unique_ptr<Child> child;
  try {
    child = spawn(r, slots_[*slot], fds[1]);
  } catch (...) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw;
  }
  ::close(fds[1]);
  child->go_fd = fds[0];
  child->standby_for = *slot;
  standby_on_[*slot] = r.run_id;
  return record(std::move(child), slots_[*slot]);
}

bool LocalExecutor::standby_ready(const std::string& run_id) const {
  const auto it = children_.find(run_id);
  return it != children_.end() && it->second->standby_for && !it->second->slots.empty();
}

void LocalExecutor::release(const std::string& run_id) {
  if (!standby_ready(run_id)) return;
  Child& c = *children_.at(run_id);
  // MSG_NOSIGNAL: a standby that has died meanwhile must not kill us with SIGPIPE; its end comes
  // through collect_exits as the released attempt's.
  [[maybe_unused]] const ssize_t n = ::send(c.go_fd, &contract::kStandbyGo, 1, MSG_NOSIGNAL);
  c.close_go();
  c.standby_for.reset();
  c.started = std::chrono::steady_clock::now();
}

std::vector<std::string> LocalExecutor::standbys_behind(const std::string& run_id) const {
  std::vector<std::string> behind;
  const auto it = children_.find(run_id);
  if (it == children_.end() || it->second->standby_for) return behind;
  for (size_t i : it->second->slots)
    if (!standby_on_[i].empty()) behind.push_back(standby_on_[i]);
  return behind;
}

void LocalExecutor::hand_over(const std::string& run_id, const std::string& standby) {
  const auto it = children_.find(run_id);
  const auto next = children_.find(standby);
  if (it == children_.end() || next == children_.end() || it->second->standby_for) return;
  Child& c = *it->second;
  for (auto s = c.slots.begin(); s != c.slots.end(); ++s) {
    if (standby_on_[*s] != standby) continue;
    // The same passage as at the process's exit (collect_exits), only earlier: the slot stays
    // busy, held for the standby until the sweep releases it.
    next->second->slots = {*s};
    standby_on_[*s].clear();
    c.leaving.push_back(*s);
    c.slots.erase(s);
    return;
  }
}

void LocalExecutor::abandon(const std::string& run_id) {
  const auto it = children_.find(run_id);
  if (it == children_.end() || !it->second->standby_for) return;
  it->second->close_go();  // end of file: it exits without writing anything
  signal_child(run_id, SIGTERM);  // and at once, if still in its setup
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
    c.close_go();
    const int status = c.process.native_exit_code();
    if (WIFSIGNALED(status)) {
      e.signal = WTERMSIG(status);
    } else if (WIFEXITED(status)) {
      e.exit_code = WEXITSTATUS(status);
    }
    // The trainer's own children (a launcher's ranks) must not outlive it in our slots.
    ::kill(-c.pid, SIGKILL);
    if (c.standby_for && c.slots.empty()) standby_on_[*c.standby_for].clear();
    for (size_t i : c.slots) {
      if (!c.standby_for && !standby_on_[i].empty()) {
        // The slot's standby takes it over, held until the sweep releases it (no other run
        // may start in it meanwhile).
        children_.at(standby_on_[i])->slots = {i};
        standby_on_[i].clear();
        continue;
      }
      busy_[i] = false;
    }
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
  // line, so a recycled pid is left alone. A trainer we started leads its own process group,
  // which holds a launcher's ranks: the whole group is stopped. Ranks left behind by a launcher
  // that died are found in its group by the run directory in their command lines.
  int pid = 0;
  if (std::sscanf(a.executor_ref.c_str(), "pid:%d", &pid) != 1 || pid <= 0) return false;
  const bool leader_runs = process_runs_with(pid, a.run_dir);
  const bool whole_group = leader_runs && process_group(pid) == pid;
  const auto left = [&]() -> std::vector<int> {
    if (whole_group) return group_members(pid, nullptr);
    if (leader_runs) return process_runs_with(pid, a.run_dir) ? std::vector<int>{pid} : std::vector<int>{};
    return group_members(pid, &a.run_dir);
  };
  const auto signal_all = [&](int sig) {
    if (whole_group) {
      ::kill(-pid, sig);
      return;
    }
    for (int p : left()) ::kill(p, sig);
  };
  if (left().empty()) return false;
  signal_all(SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (!left().empty()) {
    if (std::chrono::steady_clock::now() > deadline) {
      signal_all(SIGKILL);
      for (int i = 0; i < 100 && !left().empty(); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

}  // namespace mxablate::orchestrator
