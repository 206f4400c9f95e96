#include "mxablate/trainer/rules/live_target.h"

#include "mxablate/contract/target_file.h"

namespace mxablate::trainer {

LiveTarget::LiveTarget(const contract::TargetConfig& config, std::filesystem::path run_dir)
    : run_dir_(std::move(run_dir)),
      live_(!config.val_loss.has_value()),
      stop_at_target_(config.stop_at_target),
      current_(config.val_loss) {}

LiveTarget::Change LiveTarget::read() {
  Change change;
  if (!live_) return change;
  const contract::TargetFileRead r = contract::read_target_file(run_dir_);
  if (r.target) {
    last_problem_.clear();
    if (current_ != r.target->val_loss) {
      current_ = r.target->val_loss;
      change.adopted = current_;
      change.basis = r.target->basis;
    }
  } else if (!r.problem.empty() && r.problem != last_problem_) {
    last_problem_ = r.problem;
    // One line for the event log and the terminal, whatever the file held (the reader's words
    // are printable already; the cut keeps the event within its string limit).
    change.ignored = r.problem.size() > 300 ? r.problem.substr(0, 300) + "..." : r.problem;
  }
  return change;
}

}  // namespace mxablate::trainer
