// Progress of a sweep for a person watching: on a terminal, a block redrawn in place (counts of
// runs pending / running / finished / diverged / failed, then one line per running run with its
// step, tokens, last loss and ETA) with lifecycle messages scrolling above it; elsewhere (a log
// file, CI), plain timestamped lines for each launch and end plus a periodic summary.
#pragma once

#include <cstdint>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mxablate::orchestrator {

struct RunProgress {
  std::string run_id;
  std::string label;  // "FDW seed=2"
  int attempt = 1;
  std::optional<int64_t> step;
  std::optional<double> tokens;
  double max_tokens = 0;
  std::optional<double> loss;      // latest training loss
  std::optional<double> val_loss;  // latest evaluation
  std::optional<double> tokens_per_s;
  double elapsed_s = 0;  // this attempt
  std::optional<double> eta_s() const;
};

struct SweepSnapshot {
  std::string sweep;
  size_t total = 0, pending = 0, running = 0, finished = 0, diverged = 0, failed = 0,
         interrupted = 0;
  std::vector<RunProgress> active;
  double elapsed_s = 0;
  bool stopping = false;
};

// "1h02m", "4m05s", "12s"; "?" when unknown.
std::string format_duration(std::optional<double> seconds);
// "1.5M", "820k", "12".
std::string format_count(double n);

// The lines of the live block for `s`, at most `width` columns each.
std::vector<std::string> render_progress_block(const SweepSnapshot& s, size_t width);
std::string render_summary_line(const SweepSnapshot& s);

class ProgressSink {
 public:
  virtual ~ProgressSink() = default;
  virtual void message(const std::string& line) = 0;  // a lifecycle event (launch, end, retry)
  virtual void update(const SweepSnapshot& s) = 0;    // called every loop iteration
  virtual void finish(const SweepSnapshot& s) = 0;
};

enum class ProgressMode { kAuto, kTerminal, kPlain, kNone };

// kAuto: a terminal block when `out` is a terminal, plain lines otherwise.
std::unique_ptr<ProgressSink> make_progress(ProgressMode mode, std::FILE* out);

}  // namespace mxablate::orchestrator
