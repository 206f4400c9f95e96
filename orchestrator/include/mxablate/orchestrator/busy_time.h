// How busy a sweep kept its slots and where their time went (docs/design.md §9, "Busy slots"),
// from each attempt's run_end timings (kept per attempt in the results store). A slot is busy
// while it does a run's work: training, evaluation and checkpoints, all of them the device's
// work (busy_seconds, the one definition). A slot's busy fraction is its attempts' busy time over
// the sweep's wall time so far, the union of the spans of all its attempts (open ones up to
// now), so the time between two `mxablate run`s of a sweep is not counted against it. The rest of
// the wall time is setup the slot waited for, and idle time (launch gaps, a trainer's teardown,
// no run to give it). A prestarted attempt's setup and its wait for the slot overlapped the run
// before it: shown, but not part of the slot's wall time.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mxablate::orchestrator {

// An attempt's run_end fields; each missing for an attempt that wrote no run_end (a crash) or a
// trainer from before them. Rows a store holds need not be sane (another program may have
// written them): every reader below drops a value that is not finite or is negative.
struct AttemptTimings {
  std::optional<double> setup_s, standby_s, train_s, eval_s, checkpoint_s;
  bool prestarted = false;  // waited as a standby: its setup overlapped the run before it
};

// Busy time, the one definition: train_s + eval_s + checkpoint_s. nullopt unless all three are
// known, finite and not negative.
std::optional<double> busy_seconds(const AttemptTimings& t);

struct AttemptSpan {
  std::string slot;  // "gpu0", or several joined with '+' (one run of several ranks)
  double launched_at = 0;  // a prestarted attempt: when it was released
  std::optional<double> ended_at;  // open: up to `now`
  AttemptTimings timings;
};

// Where one slot's time went, in seconds. Within its attempts' spans: training, evaluation,
// checkpoints (busy) and setup it waited for (attempts started normally). Outside them:
// prestarted attempts' setup and their wait for the slot.
struct SlotTime {
  std::string slot;
  double train_s = 0, eval_s = 0, checkpoint_s = 0, setup_s = 0;
  double overlapped_setup_s = 0, standby_s = 0;
  double busy_s() const { return train_s + eval_s + checkpoint_s; }
};

struct BusySummary {
  double wall_s = 0;            // the union of the attempts' spans
  std::vector<SlotTime> slots;  // by first use
  size_t untimed = 0;  // ended attempts without timings (counted as idle)
  size_t open = 0;     // attempts still running: their time counts once they end
  double total_busy_s() const;
  // Busy time over wall time: of one slot; of all slots together (over slots × wall).
  std::optional<double> fraction(const std::string& slot) const;
  std::optional<double> overall() const;
  // The wall time a slot spent neither busy nor in setup it waited for.
  double idle_s(const SlotTime& slot) const;
};

// An attempt's time counts within its own span: its busy parts at most the span (scaled down
// together when a hostile row claims more), its setup at most what the span leaves; spans that
// end before they start or are not finite count nothing.
BusySummary summarize_busy(const std::vector<AttemptSpan>& attempts, double now);

// A run's own busy fraction: its ended, timed attempts' busy time (each at most its span) over
// their spans; nullopt when it has none.
std::optional<double> run_busy_fraction(const std::vector<AttemptSpan>& attempts);

// The slots an attempt's label names ("gpu0.0+gpu1.0" → gpu0.0, gpu1.0). A label cut short for
// many ranks ("cpu0+cpu1+cpu2+…+cpu15 (16 slots)") stays one name.
std::vector<std::string> slot_parts(const std::string& label);

}  // namespace mxablate::orchestrator
