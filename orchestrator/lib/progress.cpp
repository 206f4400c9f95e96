#include "mxablate/orchestrator/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <fmt/format.h>

#include "mxablate/analysis/escape.h"

namespace mxablate::orchestrator {
namespace {

using Clock = std::chrono::steady_clock;

// Cuts `s` to `width` terminal columns (UTF-8 code points, so "—" counts once).
std::string clip(std::string s, size_t width) {
  size_t columns = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) continue;  // continuation byte
    if (++columns > width) {
      s.resize(i);
      break;
    }
  }
  return s;
}

std::string now_hms() {
  const std::time_t t = std::time(nullptr);
  char buf[16];
  std::strftime(buf, sizeof buf, "%H:%M:%S", std::localtime(&t));
  return buf;
}

size_t terminal_width(std::FILE* out) {
  winsize ws{};
  if (::ioctl(::fileno(out), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 20) return ws.ws_col;
  return 100;
}

class TerminalProgress : public ProgressSink {
 public:
  explicit TerminalProgress(std::FILE* out) : out_(out) {}
  void message(const std::string& line) override {
    clear();
    std::fprintf(out_, "%s %s\n", now_hms().c_str(), escape::terminal(line).c_str());
    std::fflush(out_);
    dirty_ = true;
  }
  void update(const SweepSnapshot& s) override {
    const auto now = Clock::now();
    if (!dirty_ && now - last_ < std::chrono::milliseconds(250)) return;
    draw(s);
    last_ = now;
    dirty_ = false;
  }
  void finish(const SweepSnapshot& s) override {
    clear();
    std::fprintf(out_, "%s\n", render_summary_line(s).c_str());
    std::fflush(out_);
  }

 private:
  void clear() {
    if (drawn_ > 0) std::fprintf(out_, "\x1b[%zuF\x1b[J", drawn_);  // up N lines, clear below
    drawn_ = 0;
  }
  void draw(const SweepSnapshot& s) {
    clear();
    const std::vector<std::string> lines = render_progress_block(s, terminal_width(out_) - 1);
    for (const auto& l : lines) std::fprintf(out_, "%s\n", l.c_str());
    drawn_ = lines.size();
    std::fflush(out_);
  }
  std::FILE* out_;
  size_t drawn_ = 0;
  bool dirty_ = true;
  Clock::time_point last_{};
};

class PlainProgress : public ProgressSink {
 public:
  explicit PlainProgress(std::FILE* out) : out_(out), last_(Clock::now()) {}
  void message(const std::string& line) override {
    std::fprintf(out_, "%s %s\n", now_hms().c_str(), escape::terminal(line).c_str());
    std::fflush(out_);
  }
  void update(const SweepSnapshot& s) override {
    if (Clock::now() - last_ < std::chrono::seconds(30)) return;
    last_ = Clock::now();
    std::fprintf(out_, "%s %s\n", now_hms().c_str(), render_summary_line(s).c_str());
    for (const RunProgress& r : s.active)
      std::fprintf(out_, "%s   %s step %s, %s/%s tokens, loss %s, ETA %s\n", now_hms().c_str(),
                   escape::terminal(r.label).c_str(), r.step ? std::to_string(*r.step).c_str() : "-",
                   r.tokens ? format_count(*r.tokens).c_str() : "0",
                   format_count(r.max_tokens).c_str(),
                   r.loss ? fmt::format("{:.4f}", *r.loss).c_str() : "-",
                   format_duration(r.eta_s()).c_str());
    std::fflush(out_);
  }
  void finish(const SweepSnapshot& s) override {
    std::fprintf(out_, "%s\n", render_summary_line(s).c_str());
    std::fflush(out_);
  }

 private:
  std::FILE* out_;
  Clock::time_point last_;
};

class NoProgress : public ProgressSink {
 public:
  void message(const std::string&) override {}
  void update(const SweepSnapshot&) override {}
  void finish(const SweepSnapshot&) override {}
};

}  // namespace

std::optional<double> RunProgress::eta_s() const {
  if (!tokens || !tokens_per_s || *tokens_per_s <= 0 || max_tokens <= 0) return std::nullopt;
  return std::max(0.0, (max_tokens - *tokens) / *tokens_per_s);
}

std::string format_duration(std::optional<double> seconds) {
  if (!seconds || !std::isfinite(*seconds) || *seconds < 0) return "?";
  const auto s = static_cast<long long>(std::llround(*seconds));
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

std::string format_count(double n) {
  const double a = std::fabs(n);
  if (a >= 1e9) return fmt::format("{:.3g}G", n / 1e9);
  if (a >= 1e6) return fmt::format("{:.3g}M", n / 1e6);
  if (a >= 1e3) return fmt::format("{:.3g}k", n / 1e3);
  return fmt::format("{:.0f}", n);
}

std::string render_summary_line(const SweepSnapshot& s) {
  std::string line = fmt::format(
      "sweep {}: {} runs — {} pending, {} running, {} finished, {} diverged, {} failed",
      escape::terminal(s.sweep),
      s.total, s.pending, s.running, s.finished, s.diverged, s.failed);
  if (s.interrupted) line += fmt::format(", {} interrupted", s.interrupted);
  line += fmt::format(" ({} elapsed)", format_duration(s.elapsed_s));
  if (s.stopping) line += " — stopping: waiting for runs to checkpoint";
  return line;
}

std::vector<std::string> render_progress_block(const SweepSnapshot& s, size_t width) {
  std::vector<std::string> lines{clip(render_summary_line(s), width)};
  // The run's label gets what the numbers leave of the line (they take 78 columns).
  const size_t label_width = std::clamp<size_t>(width > 80 ? width - 80 : 0, 14, 40);
  for (const RunProgress& r : s.active) {
    const double pct = r.tokens && r.max_tokens > 0 ? 100.0 * *r.tokens / r.max_tokens : 0.0;
    std::string line = fmt::format(
        "  {:<{}} {:>3} step {:>7} {:>6}/{:<6} {:5.1f}%  loss {:>7}  val {:>7}  ETA {:>6}",
        clip(escape::terminal(r.label), label_width), label_width, r.attempt > 1 ? fmt::format("#{}", r.attempt) : "",
        r.step ? std::to_string(*r.step) : "-", r.tokens ? format_count(*r.tokens) : "0",
        format_count(r.max_tokens), pct, r.loss ? fmt::format("{:.4f}", *r.loss) : "-",
        r.val_loss ? fmt::format("{:.4f}", *r.val_loss) : "-", format_duration(r.eta_s()));
    lines.push_back(clip(line, width));
  }
  return lines;
}

std::unique_ptr<ProgressSink> make_progress(ProgressMode mode, std::FILE* out) {
  if (mode == ProgressMode::kAuto)
    mode = ::isatty(::fileno(out)) ? ProgressMode::kTerminal : ProgressMode::kPlain;
  switch (mode) {
    case ProgressMode::kTerminal: return std::make_unique<TerminalProgress>(out);
    case ProgressMode::kPlain: return std::make_unique<PlainProgress>(out);
    default: return std::make_unique<NoProgress>();
  }
}

}  // namespace mxablate::orchestrator
