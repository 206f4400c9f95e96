#include "mxablate/orchestrator/busy_time.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace mxablate::orchestrator {
namespace {

// A duration a row holds, if it is one: finite and not negative.
std::optional<double> duration(const std::optional<double>& v) {
  if (v && std::isfinite(*v) && *v >= 0) return v;
  return std::nullopt;
}

// The span of an attempt ended by `now`, if sane.
std::optional<double> span_of(const AttemptSpan& a, double now) {
  const double end = a.ended_at.value_or(now);
  if (!std::isfinite(a.launched_at) || !std::isfinite(end) || end < a.launched_at) return std::nullopt;
  return end - a.launched_at;
}

// The length of the union of some [from, to] spans.
double union_length(std::vector<std::pair<double, double>> spans) {
  std::sort(spans.begin(), spans.end());
  double length = 0, covered_to = -HUGE_VAL;
  for (const auto& [from, to] : spans) {
    const double start = std::max(from, covered_to);
    if (to > start) length += to - start;
    covered_to = std::max(covered_to, to);
  }
  return length;
}

}  // namespace

std::optional<double> busy_seconds(const AttemptTimings& t) {
  const auto train = duration(t.train_s), eval = duration(t.eval_s), ckpt = duration(t.checkpoint_s);
  if (!train || !eval || !ckpt) return std::nullopt;
  const double busy = *train + *eval + *ckpt;
  return std::isfinite(busy) ? std::optional(busy) : std::nullopt;
}

std::vector<std::string> slot_parts(const std::string& label) {
  if (label.find("…") != std::string::npos) return {label};
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= label.size()) {
    const size_t plus = label.find('+', start);
    const std::string part = label.substr(start, plus == std::string::npos ? std::string::npos : plus - start);
    if (!part.empty()) parts.push_back(part);
    if (plus == std::string::npos) break;
    start = plus + 1;
  }
  if (parts.empty()) parts.push_back(label);
  return parts;
}

BusySummary summarize_busy(const std::vector<AttemptSpan>& attempts, double now) {
  BusySummary s;
  std::vector<std::pair<double, double>> spans;
  std::map<std::string, std::vector<std::pair<double, double>>> slot_spans;
  for (const AttemptSpan& a : attempts) {
    const std::optional<double> span = span_of(a, now);
    if (span) spans.emplace_back(a.launched_at, a.launched_at + *span);
    if (span)
      for (const std::string& slot : slot_parts(a.slot))
        slot_spans[slot].emplace_back(a.launched_at, a.launched_at + *span);
    if (!a.ended_at) ++s.open;
    // The attempt's time within its span: busy parts, then the setup it waited for.
    SlotTime t;
    const std::optional<double> busy = busy_seconds(a.timings);
    if (busy && span && a.ended_at) {
      const double scale = *busy > *span ? *span / *busy : 1.0;
      t.train_s = *a.timings.train_s * scale;
      t.eval_s = *a.timings.eval_s * scale;
      t.checkpoint_s = *a.timings.checkpoint_s * scale;
      const double setup = duration(a.timings.setup_s).value_or(0);
      if (a.timings.prestarted) t.overlapped_setup_s = setup;
      else t.setup_s = std::min(setup, std::max(0.0, *span - t.busy_s()));
      if (a.timings.prestarted) t.standby_s = duration(a.timings.standby_s).value_or(0);
    } else if (a.ended_at) {
      ++s.untimed;
    }
    for (const std::string& slot : slot_parts(a.slot)) {
      auto it = std::find_if(s.slots.begin(), s.slots.end(),
                             [&](const SlotTime& x) { return x.slot == slot; });
      if (it == s.slots.end()) {
        s.slots.push_back({slot});
        it = std::prev(s.slots.end());
      }
      it->train_s += t.train_s;
      it->eval_s += t.eval_s;
      it->checkpoint_s += t.checkpoint_s;
      it->setup_s += t.setup_s;
      it->overlapped_setup_s += t.overlapped_setup_s;
      it->standby_s += t.standby_s;
    }
  }
  s.wall_s = union_length(spans);
  // One slot's attempts overlap where the next run takes the slot at the last one's run_end
  // while that trainer still tears down, so each attempt's own cap can count the overlap twice:
  // the slot's time also counts at most once, its busy parts at most the union of its attempts'
  // spans and its setup at most what that union leaves (docs/design.md §9, "Busy slots").
  for (SlotTime& t : s.slots) {
    const double slot_wall = union_length(slot_spans[t.slot]);
    const double busy = t.busy_s();
    if (busy > slot_wall) {
      const double scale = busy > 0 ? slot_wall / busy : 0.0;
      t.train_s *= scale;
      t.eval_s *= scale;
      t.checkpoint_s *= scale;
    }
    t.setup_s = std::min(t.setup_s, std::max(0.0, slot_wall - t.busy_s()));
  }
  return s;
}

std::optional<double> run_busy_fraction(const std::vector<AttemptSpan>& attempts) {
  double busy = 0, spans = 0;
  for (const AttemptSpan& a : attempts) {
    if (!a.ended_at) continue;
    const std::optional<double> span = span_of(a, *a.ended_at);
    const std::optional<double> b = busy_seconds(a.timings);
    if (!span || *span <= 0 || !b) continue;
    busy += std::min(*b, *span);
    spans += *span;
  }
  if (spans <= 0) return std::nullopt;
  return busy / spans;
}

double BusySummary::total_busy_s() const {
  double total = 0;
  for (const SlotTime& t : slots) total += t.busy_s();
  return total;
}

std::optional<double> BusySummary::fraction(const std::string& slot) const {
  if (wall_s <= 0) return std::nullopt;
  for (const SlotTime& t : slots)
    if (t.slot == slot) return std::min(1.0, t.busy_s() / wall_s);
  return std::nullopt;
}

std::optional<double> BusySummary::overall() const {
  if (wall_s <= 0 || slots.empty()) return std::nullopt;
  return std::min(1.0, total_busy_s() / (wall_s * static_cast<double>(slots.size())));
}

double BusySummary::idle_s(const SlotTime& slot) const {
  return std::max(0.0, wall_s - slot.busy_s() - slot.setup_s);
}

}  // namespace mxablate::orchestrator
