// How busy a sweep kept its slots (docs/design.md §9, "Busy slots"): each attempt's busy time is
// its trainer's train_s + eval_s (run_end, kept per attempt in the results store); a slot's busy
// fraction is its attempts' busy time over the sweep's wall time so far, the union of the spans
// of all its attempts (open ones up to now), so the time between two `mxablate run`s of a sweep
// is not counted against it. Setup, a standby's wait and checkpoints are not busy.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mxablate::orchestrator {

struct AttemptSpan {
  std::string slot;  // "gpu0", or several joined with '+' (one run of several ranks)
  double launched_at = 0;
  std::optional<double> ended_at;  // open: up to `now`
  std::optional<double> busy_s;    // train_s + eval_s; unknown for a crash or an older trainer
};

struct BusySummary {
  double wall_s = 0;  // the union of the attempts' spans
  std::vector<std::pair<std::string, double>> slots;  // busy seconds per slot, by first use
  size_t untimed = 0;  // ended attempts without timings (counted as not busy)
  size_t open = 0;     // attempts still running: their busy time counts once they end
  double total_busy_s() const;
  // Busy time over wall time: of one slot; of all slots together (over slots × wall).
  std::optional<double> fraction(const std::string& slot) const;
  std::optional<double> overall() const;
};

// Rows a store holds need not be sane (another program may have written them): spans that end
// before they start or are not finite count nothing, and an attempt's busy time counts at most
// its own span.
BusySummary summarize_busy(const std::vector<AttemptSpan>& attempts, double now);

// The slots an attempt's label names ("gpu0.0+gpu1.0" → gpu0.0, gpu1.0). A label cut short for
// many ranks ("cpu0+cpu1+cpu2+…+cpu15 (16 slots)") stays one name.
std::vector<std::string> slot_parts(const std::string& label);

}  // namespace mxablate::orchestrator
