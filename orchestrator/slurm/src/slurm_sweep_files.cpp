#include "mxablate/orchestrator/slurm_sweep_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace mxablate::orchestrator {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Appends one line and fsyncs: the journal must survive the orchestrator's death right after.
void append_line(const fs::path& file, const std::string& line) {
  std::error_code ec;
  fs::create_directories(file.parent_path(), ec);
  if (ec)
    throw std::runtime_error(fmt::format("cannot create {}: {}", file.parent_path().string(),
                                         ec.message()));
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0)
    throw std::runtime_error(fmt::format("cannot open {}: {}", file.string(), std::strerror(errno)));
  const std::string text = line + "\n";
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      throw std::runtime_error(fmt::format("cannot write {}: {}", file.string(), std::strerror(err)));
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    throw std::runtime_error(fmt::format("cannot sync {}: {}", file.string(), std::strerror(err)));
  }
  ::close(fd);
}

template <typename F>
void for_each_json_line(const fs::path& file, F&& f) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      f(json::parse(line));
    } catch (const json::exception&) {
      // A line torn by a crash (or edited by hand into nonsense) describes nothing we can use.
    }
  }
}

}  // namespace

SlurmSweepFiles::SlurmSweepFiles(const fs::path& sweep_dir) : dir_(sweep_dir / "slurm") {}

fs::path SlurmSweepFiles::script_path(int number) const {
  return dir_ / fmt::format("array-{:04}.sh", number);
}

fs::path SlurmSweepFiles::exit_file(const SlurmTaskRef& t) const {
  return dir_ / (t.text() + ".exit");
}

fs::path SlurmSweepFiles::log_file(const SlurmTaskRef& t) const {
  return dir_ / (t.text() + ".log");
}

std::optional<int> SlurmSweepFiles::read_exit_status(const SlurmTaskRef& t) const {
  std::ifstream in(exit_file(t));
  int status = -1;
  if (!(in >> status) || status < 0 || status > 255) return std::nullopt;
  return status;
}

std::vector<SlurmSubmission> SlurmSweepFiles::read_submissions() const {
  std::vector<SlurmSubmission> out;
  for_each_json_line(dir_ / "submissions.jsonl", [&](const json& j) {
    SlurmSubmission s;
    s.job_id = j.at("job_id").get<std::string>();
    s.number = j.value("number", 0);
    s.array_spec = j.value("array", "");
    s.submitted_at = j.value("submitted_at", 0.0);
    for (const json& t : j.at("tasks"))
      s.tasks.push_back({t.at("run_id").get<std::string>(), t.at("run_dir").get<std::string>(),
                         t.value("attempt", 1), t.value("resume", false)});
    out.push_back(std::move(s));
  });
  return out;
}

void SlurmSweepFiles::append_submission(const SlurmSubmission& s) const {
  json tasks = json::array();
  for (const ArrayTask& t : s.tasks)
    tasks.push_back({{"run_id", t.run_id},
                     {"run_dir", t.run_dir.string()},
                     {"attempt", t.attempt},
                     {"resume", t.resume}});
  append_line(dir_ / "submissions.jsonl", json{{"job_id", s.job_id},
                                              {"number", s.number},
                                              {"script", script_path(s.number).filename().string()},
                                              {"array", s.array_spec},
                                              {"submitted_at", s.submitted_at},
                                              {"tasks", tasks}}
                                              .dump());
}

int SlurmSweepFiles::next_submission_number() const {
  int highest = 0;
  for (const SlurmSubmission& s : read_submissions()) highest = std::max(highest, s.number);
  // A script written by an orchestrator that died before sbatch answered still holds its number.
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    int n = 0;
    if (std::sscanf(e.path().filename().c_str(), "array-%d.sh", &n) == 1) highest = std::max(highest, n);
  }
  return highest + 1;
}

std::vector<SlurmCancelRecord> SlurmSweepFiles::read_cancels() const {
  std::vector<SlurmCancelRecord> out;
  for_each_json_line(dir_ / "cancels.jsonl", [&](const json& j) {
    SlurmCancelRecord r;
    r.at = j.value("at", 0.0);
    r.by = j.value("by", "");
    r.job_ids = j.at("job_ids").get<std::vector<std::string>>();
    out.push_back(std::move(r));
  });
  return out;
}

void SlurmSweepFiles::append_cancel(const SlurmCancelRecord& r) const {
  append_line(dir_ / "cancels.jsonl",
              json{{"at", r.at}, {"by", r.by}, {"job_ids", r.job_ids}}.dump());
}

}  // namespace mxablate::orchestrator
