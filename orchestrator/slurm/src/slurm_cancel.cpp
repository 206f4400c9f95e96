#include "mxablate/orchestrator/slurm_cancel.h"

#include <algorithm>
#include <chrono>
#include <fmt/format.h>
#include <set>

#include "mxablate/orchestrator/slurm_array_script.h"
#include "mxablate/orchestrator/slurm_sweep_files.h"

namespace mxablate::orchestrator {

SlurmCancelReport cancel_sweep_jobs(SlurmClient& slurm, const std::string& sweep,
                                    const std::filesystem::path& sweep_dir,
                                    const std::vector<std::string>& open_refs,
                                    const std::string& by) {
  const SlurmSweepFiles files(sweep_dir);
  SlurmCancelReport report;
  std::set<SlurmTaskRef> counted;
  std::set<std::string> cancelled;
  // A running orchestrator may submit a retry while we cancel: look again until nothing new
  // turns up (it notices the cancel record within a poll and submits nothing after that).
  for (int round = 0; round < 5; ++round) {
    std::set<std::string> jobs;
    for (const SlurmSubmission& s : files.read_submissions()) jobs.insert(s.job_id);
    for (const std::string& ref : open_refs)
      if (const auto r = parse_slurm_task_ref(ref)) jobs.insert(r->job_id);
    std::vector<SlurmTaskStatus> statuses = slurm.query_jobs({jobs.begin(), jobs.end()});
    for (SlurmTaskStatus& s : slurm.query_name(slurm_job_name(sweep, sweep_dir)))
      statuses.push_back(std::move(s));
    std::vector<std::string> live_jobs;
    const std::string name = slurm_job_name(sweep, sweep_dir);
    for (const SlurmTaskStatus& s : statuses) {
      // A job id Slurm has since given to someone else's job is not ours to cancel.
      if (!s.name.empty() && s.name != name) continue;
      if (s.state.ended() || !counted.insert(s.ref).second) continue;
      (s.state.phase == SlurmPhase::kQueued ? report.queued : report.running) += 1;
      if (!cancelled.count(s.ref.job_id) &&
          std::find(live_jobs.begin(), live_jobs.end(), s.ref.job_id) == live_jobs.end())
        live_jobs.push_back(s.ref.job_id);
    }
    if (live_jobs.empty()) break;
    try {
      files.append_cancel({std::chrono::duration<double>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count(),
                           by, live_jobs});
    } catch (const std::exception& e) {
      report.warning = fmt::format(
          "could not record the cancel ({}): an mxablate running this sweep will resubmit the "
          "cancelled runs",
          e.what());
    }
    slurm.cancel(live_jobs);
    for (const std::string& j : live_jobs) {
      cancelled.insert(j);
      report.job_ids.push_back(j);
    }
  }
  return report;
}

}  // namespace mxablate::orchestrator
