#include "mxablate/orchestrator/slurm_client.h"

#include <fmt/format.h>

#include <array>
#include <charconv>
#include <map>

#include "mxablate/orchestrator/command_runner.h"

namespace mxablate::orchestrator {
namespace {

namespace fs = std::filesystem;

// The line of a Slurm command's stderr that says what went wrong: the last one ("fatal: …"
// follows the "error: …" lines leading to it), without the "squeue: error: " prefixes.
std::string slurm_message(const std::string& text, const std::string& program) {
  std::string last;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (!line.empty()) last = line;
    start = end + 1;
  }
  for (const std::string& prefix : {program + ": ", std::string("error: "), std::string("fatal: ")})
    if (last.rfind(prefix, 0) == 0) last = last.substr(prefix.size());
  return last;
}

std::string first_line(const std::string& text) {
  size_t b = 0;
  while (b < text.size() && (text[b] == '\n' || text[b] == ' ')) ++b;
  const size_t e = text.find('\n', b);
  std::string line = text.substr(b, e == std::string::npos ? std::string::npos : e - b);
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  return line;
}

class CommandClient : public SlurmClient {
 public:
  explicit CommandClient(std::chrono::milliseconds timeout) : timeout_(timeout) {}

  std::string submit(const fs::path& script, const std::string& spec, bool hold) override {
    std::vector<std::string> args{"--parsable"};
    if (hold) args.push_back("--hold");
    args.push_back("--array=" + spec);
    args.push_back(script.string());
    const CommandOutput r = run("sbatch", args);
    check(r, "sbatch");
    // --parsable prints "JOBID" or "JOBID;CLUSTER".
    std::string id = first_line(r.out);
    id = id.substr(0, id.find(';'));
    if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos)
      throw SlurmError(fmt::format("sbatch printed no job id (\"{}\")", first_line(r.out)), false);
    return id;
  }

  void release(const std::string& job_id) override {
    check(run("scontrol", {"release", job_id}), "scontrol release " + job_id);
  }

  std::vector<SlurmTaskStatus> query_jobs(const std::vector<std::string>& job_ids) override {
    if (job_ids.empty()) return {};
    std::string list;
    for (const std::string& id : job_ids) list += (list.empty() ? "" : ",") + id;
    return query({"--jobs=" + list});
  }

  std::vector<SlurmTaskStatus> query_name(const std::string& job_name) override {
    return query({"--name=" + job_name});
  }

  void cancel(const std::vector<std::string>& ids, bool kill_now) override {
    if (ids.empty()) return;
    std::vector<std::string> args;
    if (kill_now) args = {"--signal=KILL", "--full"};
    args.insert(args.end(), ids.begin(), ids.end());
    const CommandOutput r = run("scancel", args);
    // scancel complains about tasks that already ended; that is what we wanted anyway.
    if (r.exit_code != 0 && !r.timed_out &&
        (r.err.find("already completing or completed") != std::string::npos ||
         r.err.find("Invalid job id") != std::string::npos))
      return;
    check(r, "scancel");
  }

  int max_array_size() override {
    CommandOutput r;
    try {
      r = run("scontrol", {"show", "config"});
    } catch (const SlurmError&) {
      return 0;
    }
    if (r.exit_code != 0) return 0;
    // "MaxArraySize            = 1001"
    const size_t p = r.out.find("MaxArraySize");
    if (p == std::string::npos) return 0;
    const size_t eq = r.out.find('=', p);
    if (eq == std::string::npos) return 0;
    size_t b = eq + 1;
    while (b < r.out.size() && r.out[b] == ' ') ++b;
    int v = 0;
    const auto [ptr, ec] = std::from_chars(r.out.data() + b, r.out.data() + r.out.size(), v);
    return ec == std::errc() ? v : 0;
  }

 private:
  std::vector<SlurmTaskStatus> query(std::vector<std::string> selection) {
    std::vector<std::string> args{"-h", "-r", "--states=all", "-O", squeue_format()};
    args.insert(args.end(), selection.begin(), selection.end());
    const CommandOutput r = run("squeue", args);
    if (r.exit_code != 0 && !r.timed_out && squeue_reports_unknown_jobs(r.err)) return {};
    check(r, "squeue");
    return parse_squeue_output(r.out).tasks;
  }

  CommandOutput run(const std::string& name, const std::vector<std::string>& args) {
    auto it = programs_.find(name);
    if (it == programs_.end()) {
      const auto path = find_program(name);
      if (!path)
        throw SlurmError(fmt::format("{} is not on PATH — run mxablate on a host where the Slurm "
                                     "commands work (a login node)",
                                     name),
                         false);
      it = programs_.emplace(name, *path).first;
    }
    try {
      return run_command(it->second, args, timeout_);
    } catch (const std::runtime_error& e) {
      throw SlurmError(e.what(), false);
    }
  }

  void check(const CommandOutput& r, const std::string& what) const {
    if (r.timed_out)
      throw SlurmError(fmt::format("{} did not answer within {} s", what,
                                   std::chrono::duration_cast<std::chrono::seconds>(timeout_).count()),
                       true);
    if (r.exit_code == 0) return;
    const std::string program = what.substr(0, what.find(' '));
    std::string message = slurm_message(r.err, program);
    if (message.empty()) message = slurm_message(r.out, program);
    if (message.empty()) message = fmt::format("exit code {}", r.exit_code);
    throw SlurmError(fmt::format("{} failed: {}", what, message),
                     is_transient_slurm_message(r.err));
  }

  std::chrono::milliseconds timeout_;
  std::map<std::string, fs::path> programs_;
};

}  // namespace

bool is_transient_slurm_message(const std::string& text) {
  static constexpr std::array<std::string_view, 9> kTransient = {
      "Socket timed out",
      "Unable to contact slurm controller",
      "Resource temporarily unavailable",
      "Connection refused",
      "Communication connection failure",
      "Zero Bytes were transmitted or received",
      "Slurm backup controller in standby mode",
      "slurm_receive_msg",
      "Transport endpoint is not connected"};
  for (std::string_view t : kTransient)
    if (text.find(t) != std::string::npos) return true;
  return false;
}

std::unique_ptr<SlurmClient> make_slurm_command_client(std::chrono::milliseconds timeout) {
  return std::make_unique<CommandClient>(timeout);
}

}  // namespace mxablate::orchestrator
