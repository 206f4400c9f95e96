// A run's projected outcome as the trainer recorded it (its `projection` events, contract
// event_log.h; docs/design.md §4, "Projected outcomes and hopeless runs"): the last projection of
// its validation curve towards the target, or why it has none. What a table shows beside a run
// that never reached the target, and above all beside one stopped as projected not to reach it.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace mxablate::analysis {

struct RunProjection {
  double target = 0;      // the target the projection was made against
  double confidence = 0;  // the intervals' two-sided level
  double loss_at_budget = 0, loss_at_budget_lo = 0, loss_at_budget_hi = 0;
  // nullopt: not within the projection's horizon (100 budgets at the schedule's last rate).
  std::optional<double> tokens_to_target, tokens_to_target_lo, tokens_to_target_hi;
  bool not_reaching = false;  // that evaluation's verdict
};

// The last projection event's detail (the store's events.detail) as a projection, or, in
// `reason`, why there is none (the event's own reason; a detail that is not a projection).
struct ProjectionRecord {
  std::optional<RunProjection> projection;
  std::string no_projection_reason;
};
ProjectionRecord projection_from_detail(const nlohmann::json& detail);

// Why a run without any projection event has none.
inline constexpr const char* kNoTargetWhileTraining = "no target was known while it trained";

}  // namespace mxablate::analysis
