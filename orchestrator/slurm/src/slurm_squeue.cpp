#include "mxablate/orchestrator/slurm_squeue.h"

#include <charconv>

namespace mxablate::orchestrator {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

bool all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

std::optional<int> to_int(std::string_view s) {
  int v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

std::vector<std::string_view> split(std::string_view line, char sep) {
  std::vector<std::string_view> fields;
  size_t start = 0;
  while (true) {
    const size_t p = line.find(sep, start);
    if (p == std::string_view::npos) {
      fields.push_back(line.substr(start));
      return fields;
    }
    fields.push_back(line.substr(start, p - start));
    start = p + 1;
  }
}

}  // namespace

std::string SlurmTaskRef::text() const { return job_id + "_" + std::to_string(task); }

std::optional<SlurmTaskRef> parse_slurm_task_ref(std::string_view text) {
  text = trim(text);
  const size_t us = text.find('_');
  if (us == std::string_view::npos) return std::nullopt;
  const std::string_view job = text.substr(0, us), task = text.substr(us + 1);
  if (!all_digits(job) || !all_digits(task) || task.size() > 9) return std::nullopt;
  const auto t = to_int(task);
  if (!t) return std::nullopt;
  return SlurmTaskRef{std::string(job), *t};
}

std::string squeue_format() {
  // "Field:|" = unpadded, followed by '|'; the last field has no separator after it.
  return "ArrayJobID:|,ArrayTaskID:|,State:|,Reason:|,exit_code:|,NodeList:|,Name:";
}

SqueueParse parse_squeue_output(std::string_view text) {
  SqueueParse out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = trim(text.substr(start, end - start));
    start = end + 1;
    if (line.empty()) continue;
    const auto f = split(line, '|');
    // A pending range ("[4-9%2]") appears without -r; a plain job has "N/A" as its task id.
    if (f.size() < 4 || !all_digits(trim(f[0])) || !all_digits(trim(f[1])) ||
        trim(f[1]).size() > 9) {
      ++out.skipped;
      continue;
    }
    SlurmTaskStatus s;
    s.ref = {std::string(trim(f[0])), *to_int(trim(f[1]))};
    s.state = parse_slurm_job_state(trim(f[2]));
    s.reason = std::string(trim(f[3]));
    if (f.size() > 4) s.wait_status = to_int(trim(f[4]));
    if (f.size() > 5) {
      const std::string_view nodes = trim(f[5]);
      if (nodes != "(null)" && nodes != "n/a") s.nodes = std::string(nodes);
    }
    if (f.size() > 6) {
      // Everything after the sixth '|' (a name may contain one).
      size_t pos = 0;
      for (int k = 0; k < 6; ++k) pos = line.find('|', pos) + 1;
      s.name = std::string(trim(line.substr(pos)));
    }
    out.tasks.push_back(std::move(s));
  }
  return out;
}

bool squeue_reports_unknown_jobs(std::string_view stderr_text) {
  return stderr_text.find("Invalid job id specified") != std::string_view::npos;
}

}  // namespace mxablate::orchestrator
