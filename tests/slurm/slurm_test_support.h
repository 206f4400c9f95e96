// Helpers of the Slurm tests: scratch directories, file reading, and FakeSlurm — an in-memory
// SlurmClient whose tasks the test moves through Slurm's states by hand, recording every call.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <optional>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "catch.h"
#include "mxablate/orchestrator/slurm_client.h"

// Substring matcher under both Catch2 v2 (Contains) and v3 (ContainsSubstring).
#if MXABLATE_CATCH_V3
inline auto has_text(const std::string& s) { return Catch::Matchers::ContainsSubstring(s); }
#else
inline auto has_text(const std::string& s) { return Catch::Matchers::Contains(s); }
#endif

namespace mxablate::slurm_test {

namespace fs = std::filesystem;

struct ScratchDir {
  fs::path path;
  explicit ScratchDir(const std::string& name) {
    std::random_device rd;
    path = fs::temp_directory_path() /
           ("mxablate-" + name + "-" + std::to_string(::getpid()) + "-" + std::to_string(rd() % 100000));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
};

inline std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

class FakeSlurm : public orchestrator::SlurmClient {
 public:
  struct Job {
    std::string id;
    fs::path script;
    std::string spec;
    bool held = false;
    std::string name;
    std::vector<orchestrator::SlurmTaskStatus> tasks;
  };

  // Behaviour the test can change.
  int next_id = 100;
  int array_limit = 1001;
  int submit_failures = 0;          // the next N submits fail …
  bool submit_failures_transient = true;
  int query_failures = 0;           // the next N squeue calls fail …
  bool query_failures_transient = true;
  std::string name_for_new_jobs;    // the job name the script would give (set by tests)
  std::function<void(const std::string& job_id)> on_release;  // e.g. check the journal
  bool cancel_ends_tasks = true;    // false: cancelled tasks end when the test says so

  // What happened.
  std::map<std::string, Job> jobs;
  std::vector<std::string> calls;  // "submit 0-2%2 hold", "release 100", "cancel 100_1", …
  int queries = 0;

  std::string submit(const fs::path& script, const std::string& spec, bool hold) override {
    calls.push_back("submit " + spec + (hold ? " hold" : ""));
    if (submit_failures > 0) {
      --submit_failures;
      throw orchestrator::SlurmError("sbatch failed: Socket timed out on send/recv operation",
                                     submit_failures_transient);
    }
    Job j;
    j.id = std::to_string(next_id++);
    j.script = script;
    j.spec = spec;
    j.held = hold;
    j.name = name_for_new_jobs;
    // "0-N[%K]" or "0"
    const std::string range = spec.substr(0, spec.find('%'));
    const size_t dash = range.find('-');
    const int last = dash == std::string::npos ? 0 : std::stoi(range.substr(dash + 1));
    for (int i = 0; i <= last; ++i) {
      orchestrator::SlurmTaskStatus t;
      t.ref = {j.id, i};
      t.state = orchestrator::parse_slurm_job_state("PENDING");
      t.reason = hold ? "JobHeldUser" : "None";
      t.name = name_for_new_jobs;
      j.tasks.push_back(t);
    }
    jobs[j.id] = j;
    return j.id;
  }

  void release(const std::string& job_id) override {
    calls.push_back("release " + job_id);
    if (on_release) on_release(job_id);
    Job& j = jobs.at(job_id);
    j.held = false;
    for (auto& t : j.tasks)
      if (t.reason == "JobHeldUser") t.reason = "None";
  }

  std::vector<orchestrator::SlurmTaskStatus> query_jobs(const std::vector<std::string>& ids) override {
    ++queries;
    fail_query_if_asked();
    std::vector<orchestrator::SlurmTaskStatus> out;
    for (const std::string& id : ids) {
      const auto it = jobs.find(id);
      if (it != jobs.end()) out.insert(out.end(), it->second.tasks.begin(), it->second.tasks.end());
    }
    return out;
  }

  std::vector<orchestrator::SlurmTaskStatus> query_name(const std::string& name) override {
    ++queries;
    fail_query_if_asked();
    std::vector<orchestrator::SlurmTaskStatus> out;
    for (const auto& [id, j] : jobs)
      if (j.name == name) out.insert(out.end(), j.tasks.begin(), j.tasks.end());
    return out;
  }

  void cancel(const std::vector<std::string>& ids, bool kill_now) override {
    for (const std::string& id : ids) {
      calls.push_back(std::string(kill_now ? "kill " : "cancel ") + id);
      if (!cancel_ends_tasks) continue;
      for (auto& [jid, j] : jobs)
        for (auto& t : j.tasks)
          if ((id == jid || id == t.ref.text()) && !t.state.ended()) {
            t.state = orchestrator::parse_slurm_job_state("CANCELLED");
            t.reason = "None";
          }
    }
  }

  int max_array_size() override { return array_limit; }

  // Test controls.
  orchestrator::SlurmTaskStatus& task(const std::string& job, int index) {
    return jobs.at(job).tasks.at(static_cast<size_t>(index));
  }
  void set_state(const std::string& job, int index, const std::string& state,
                 std::optional<int> wait_status = 0, const std::string& node = "node1") {
    auto& t = task(job, index);
    t.state = orchestrator::parse_slurm_job_state(state);
    t.wait_status = wait_status;
    t.nodes = t.state.phase == orchestrator::SlurmPhase::kQueued ? "" : node;
  }
  void forget(const std::string& job) { jobs.erase(job); }
  size_t count_calls(const std::string& prefix) const {
    size_t n = 0;
    for (const auto& c : calls) n += c.rfind(prefix, 0) == 0;
    return n;
  }

 private:
  void fail_query_if_asked() {
    if (query_failures > 0) {
      --query_failures;
      throw orchestrator::SlurmError(
          "squeue failed: slurm_load_jobs error: Unable to contact slurm controller",
          query_failures_transient);
    }
  }
};

}  // namespace mxablate::slurm_test
