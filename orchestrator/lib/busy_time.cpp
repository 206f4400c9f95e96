#include "mxablate/orchestrator/busy_time.h"

#include <algorithm>
#include <cmath>

namespace mxablate::orchestrator {

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
  for (const AttemptSpan& a : attempts) {
    const double end = a.ended_at.value_or(now);
    const bool sane = std::isfinite(a.launched_at) && std::isfinite(end) && end >= a.launched_at;
    if (sane) spans.emplace_back(a.launched_at, end);
    double busy = 0;
    if (a.busy_s && std::isfinite(*a.busy_s) && *a.busy_s >= 0 && sane)
      busy = std::min(*a.busy_s, end - a.launched_at);
    else if (a.ended_at)
      ++s.untimed;
    if (!a.ended_at) ++s.open;
    for (const std::string& slot : slot_parts(a.slot)) {
      auto it = std::find_if(s.slots.begin(), s.slots.end(),
                             [&](const auto& p) { return p.first == slot; });
      if (it == s.slots.end()) {
        s.slots.emplace_back(slot, 0.0);
        it = std::prev(s.slots.end());
      }
      it->second += busy;
    }
  }
  std::sort(spans.begin(), spans.end());
  double covered_to = -HUGE_VAL;
  for (const auto& [from, to] : spans) {
    const double start = std::max(from, covered_to);
    if (to > start) s.wall_s += to - start;
    covered_to = std::max(covered_to, to);
  }
  return s;
}

double BusySummary::total_busy_s() const {
  double total = 0;
  for (const auto& [slot, busy] : slots) total += busy;
  return total;
}

std::optional<double> BusySummary::fraction(const std::string& slot) const {
  if (wall_s <= 0) return std::nullopt;
  for (const auto& [name, busy] : slots)
    if (name == slot) return busy / wall_s;
  return std::nullopt;
}

std::optional<double> BusySummary::overall() const {
  if (wall_s <= 0 || slots.empty()) return std::nullopt;
  return total_busy_s() / (wall_s * static_cast<double>(slots.size()));
}

}  // namespace mxablate::orchestrator
