#include "slurm_cluster.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fmt/format.h>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "mxablate/orchestrator/command_runner.h"
#include "mxablate/orchestrator/slurm_client.h"
#include "mxablate/results/query.h"

namespace mxablate::slurm_test {
namespace {

struct ClusterState {
  fs::path dir;
  bool started = false;
  pid_t watchdog = -1;
};

ClusterState& state() {
  static ClusterState s;
  return s;
}

std::string last_line(const std::string& text) {
  std::string t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  const size_t nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

std::mutex timings_mutex;
std::vector<std::pair<std::string, double>> timings;

}  // namespace

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::optional<std::string> TestCluster::start() {
  ClusterState& s = state();
  // A short path (Slurm keeps sockets and pid files there) unique to this process.
  s.dir = fs::path("/tmp") / fmt::format("mxablate-slurm-{}", ::getpid());
  fs::remove_all(s.dir);
  // Its own ports, so that another cluster on this machine (another engineer's, another test
  // binary's) does not collide; 8 CPUs declared, so that Slurm's throttle — not the machine's two
  // cores — is what limits the sleeping fake trainers.
  ::setenv("MXABLATE_SLURM_PORT_OFFSET", std::to_string(1 + ::getpid() % 400).c_str(), 1);
  ::setenv("MXABLATE_SLURM_CPUS", "8", 1);
  const auto r = orchestrator::run_command("/bin/bash", {CLUSTER_SCRIPT, "start", s.dir.string()},
                                           std::chrono::seconds(90));
  if (r.exit_code == 3) {
    std::error_code ec;
    fs::remove_all(s.dir, ec);
    return last_line(r.err);
  }
  if (r.exit_code != 0)
    throw std::runtime_error(fmt::format("{} start failed (exit code {}): {}", CLUSTER_SCRIPT,
                                         r.exit_code, last_line(r.err + r.out)));
  const std::string prefix = "export SLURM_CONF=";
  const size_t p = r.out.find(prefix);
  if (p == std::string::npos)
    throw std::runtime_error("slurm-test-cluster.sh printed no SLURM_CONF: " + r.out);
  ::setenv("SLURM_CONF", last_line(r.out.substr(p + prefix.size())).c_str(), 1);
  s.started = true;
  // Should this binary be killed (a CTest timeout), the watchdog stops the daemons it leaves.
  s.watchdog = ::fork();
  if (s.watchdog == 0) {
    ::setsid();
    const std::string script = fmt::format(
        "while kill -0 {} 2>/dev/null; do sleep 1; done; exec bash '{}' stop '{}'", ::getppid(),
        CLUSTER_SCRIPT, s.dir.string());
    ::execl("/bin/bash", "bash", "-c", script.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return std::nullopt;
}

void TestCluster::stop() {
  ClusterState& s = state();
  if (!s.started) return;
  s.started = false;
  if (s.watchdog > 0) {
    ::kill(s.watchdog, SIGKILL);
    ::waitpid(s.watchdog, nullptr, 0);
  }
  orchestrator::run_command("/bin/bash", {CLUSTER_SCRIPT, "stop", s.dir.string()},
                            std::chrono::seconds(60));
  std::error_code ec;
  fs::remove_all(s.dir, ec);
}

const fs::path& TestCluster::dir() { return state().dir; }

Mxablate::Mxablate(const std::vector<std::string>& args,
                   const std::map<std::string, std::string>& env, const fs::path& output)
    : output_(output) {
  bp::environment e = boost::this_process::environment();
  // `run` checks the datasets a recipe names before launching; the fake trainer reads none, so
  // "default" is a manifest-only stand-in unless a test says otherwise.
  e["MXABLATE_DEFAULT_DATASET"] = FAKE_DEFAULT_DATASET;
  for (const auto& [k, v] : env) e[k] = v;
  std::FILE* out = std::fopen(output.c_str(), "we");
  if (!out) throw std::runtime_error("cannot write " + output.string());
  child_ = bp::child(std::string(MXABLATE_BIN), bp::args(args), e, bp::std_in < bp::null,
                     bp::std_out > out, bp::std_err > out);
  std::fclose(out);
  pid_ = child_.id();
}

Mxablate::~Mxablate() {
  if (running()) {
    ::kill(pid_, SIGKILL);
    std::error_code ec;
    child_.wait(ec);
  }
}

bool Mxablate::running() {
  if (exit_code_) return false;
  std::error_code ec;
  if (child_.running(ec)) return true;
  exit_code_ = child_.exit_code();
  return false;
}

std::optional<int> Mxablate::wait(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (running()) {
    if (std::chrono::steady_clock::now() > deadline) return std::nullopt;
    std::this_thread::sleep_for(20ms);
  }
  return exit_code_;
}

void Mxablate::signal(int sig) { ::kill(pid_, sig); }

std::string Mxablate::output() const { return read_file(output_); }

CommandResult run_mxablate(const std::vector<std::string>& args,
                           const std::map<std::string, std::string>& env,
                           std::chrono::milliseconds timeout) {
  char name[] = "/tmp/mxablate-out-XXXXXX";
  const int fd = ::mkstemp(name);
  if (fd >= 0) ::close(fd);
  CommandResult r;
  {
    Mxablate m(args, env, name);
    const auto code = m.wait(timeout);
    r.exit_code = code ? *code : -1;
    r.output = m.output();
  }
  ::unlink(name);
  return r;
}

std::string fake_recipe(const std::string& name, int steps, const std::vector<std::string>& arms,
                        const std::vector<int>& seeds, int checkpoint_every) {
  std::string arm_lines;
  for (const std::string& a : arms)
    arm_lines += a == "bf16" ? "  bf16: {}\n"
                             : fmt::format("  {}: {{precision: {{fprop: mxfp4, dgrad: mxfp4, "
                                           "wgrad: mxfp4}}}}\n",
                                           a);
  std::string seed_list;
  for (int s : seeds) seed_list += (seed_list.empty() ? "" : ", ") + std::to_string(s);
  return fmt::format(R"(name: {}
base:
  model: smoke
  data: {{seq_len: 64}}
  train: {{global_batch_tokens: 2048, max_tokens: {}, lr: 1e-3}}
  eval: {{every_tokens: 20480, tokens: 4096}}
  checkpoint: {{every_steps: {}}}
arms:
{}grid:
  seed: [{}]
)",
                     name, steps * 2048, checkpoint_every, arm_lines, seed_list);
}

std::vector<std::vector<nlohmann::json>> query(const fs::path& db, const std::string& sql) {
  auto handle = results::open_read_only(db.string());
  return results::run_read_only_query(*handle, sql).rows;
}

std::vector<nlohmann::json> read_events(const fs::path& run_dir) {
  std::vector<nlohmann::json> events;
  std::ifstream in(run_dir / "events.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // a line still being written
    try {
      events.push_back(nlohmann::json::parse(line));
    } catch (const nlohmann::json::exception&) {
    }
  }
  return events;
}

bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(100ms);
  }
  return true;
}

QueueObservation watch_queue(const std::string& job_name, const std::function<bool()>& stop) {
  QueueObservation o;
  auto slurm = orchestrator::make_slurm_command_client(std::chrono::seconds(20));
  while (!stop()) {
    int running = 0;
    for (const auto& t : slurm->query_name(job_name)) {
      if (t.state.phase == orchestrator::SlurmPhase::kRunning) ++running;
      if (t.state.phase == orchestrator::SlurmPhase::kQueued && t.reason == "JobArrayTaskLimit")
        o.saw_throttled = true;
    }
    o.max_running = std::max(o.max_running, running);
    ++o.polls;
    std::this_thread::sleep_for(150ms);
  }
  return o;
}

int live_tasks(const std::string& job_name) {
  int n = 0;
  for (const auto& t : orchestrator::make_slurm_command_client()->query_name(job_name))
    n += !t.state.ended();
  return n;
}

void record_timing(const std::string& what, double seconds) {
  std::lock_guard<std::mutex> lock(timings_mutex);
  timings.emplace_back(what, seconds);
}

std::string timings_report() {
  std::lock_guard<std::mutex> lock(timings_mutex);
  std::string s;
  for (const auto& [what, secs] : timings) s += fmt::format("  {:<58} {:8.2f} s\n", what, secs);
  return s;
}

}  // namespace mxablate::slurm_test
