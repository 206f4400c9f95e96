#include "slurm_status.h"

#include <fmt/format.h>

#include <set>
#include <vector>

#include "mxablate/orchestrator/command_runner.h"
#include "mxablate/orchestrator/slurm_client.h"

namespace mxablate::cli {

using namespace mxablate::orchestrator;

SlurmColumn slurm_column(results::Database& db, int64_t sweep_id) {
  SlurmColumn column;
  results::Statement st(db,
                        "SELECT a.run_id, a.executor_ref, a.ended_at IS NULL FROM attempts a "
                        "JOIN runs r USING (run_id) WHERE r.sweep_id = ?1 AND a.executor = 'slurm' "
                        "AND a.attempt = (SELECT MAX(b.attempt) FROM attempts b "
                        "                  WHERE b.run_id = a.run_id)");
  st.bind(1, sweep_id);
  std::map<std::string, SlurmTaskRef> open;
  while (st.step()) {
    const std::string run_id = st.get_text(0);
    const std::string ref = st.is_null(1) ? "" : st.get_text(1);
    column.by_run[run_id] = ref;
    if (st.get_int(2) != 0)
      if (const auto r = parse_slurm_task_ref(ref)) open[run_id] = *r;
  }
  if (open.empty()) return column;
  if (!find_program("squeue")) {
    column.note = "(no squeue on this host: the Slurm states of open attempts are unknown)";
    return column;
  }
  std::set<std::string> jobs;
  for (const auto& [run_id, ref] : open) jobs.insert(ref.job_id);
  std::vector<SlurmTaskStatus> statuses;
  try {
    statuses = make_slurm_command_client(std::chrono::seconds(10))
                   ->query_jobs({jobs.begin(), jobs.end()});
  } catch (const SlurmError& e) {
    column.note = fmt::format("(Slurm states unknown: {})", e.what());
    return column;
  }
  for (const auto& [run_id, ref] : open) {
    std::string text = ref.text() + " gone";  // Slurm no longer knows it
    for (const SlurmTaskStatus& s : statuses) {
      if (!(s.ref == ref)) continue;
      text = ref.text() + " " + s.state.name;
      if (s.state.phase == SlurmPhase::kQueued && !s.reason.empty() && s.reason != "None")
        text += " (" + s.reason + ")";
      else if (s.state.phase == SlurmPhase::kRunning && !s.nodes.empty())
        text += " on " + s.nodes;
    }
    column.by_run[run_id] = text;
  }
  return column;
}

}  // namespace mxablate::cli
