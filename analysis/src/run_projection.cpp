// Reading the trainer's projection events (run_projection.h). The detail comes from the store,
// which anyone may have written: a field of the wrong type is a record without a projection,
// never an exception.
#include "mxablate/analysis/run_projection.h"

namespace mxablate::analysis {
namespace {

using nlohmann::json;

std::optional<double> number(const json& d, const char* key) {
  const auto it = d.find(key);
  if (it == d.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

}  // namespace

ProjectionRecord projection_from_detail(const json& detail) {
  ProjectionRecord out;
  if (!detail.is_object()) {
    out.no_projection_reason = "its projection event is not readable";
    return out;
  }
  if (const auto it = detail.find("no_projection"); it != detail.end() && it->is_string()) {
    out.no_projection_reason = it->get<std::string>();
    return out;
  }
  const auto loss = number(detail, "loss_at_budget"), lo = number(detail, "loss_at_budget_lo"),
             hi = number(detail, "loss_at_budget_hi"), confidence = number(detail, "confidence");
  if (!loss || !lo || !hi || !confidence) {
    out.no_projection_reason = "its projection event is not readable";
    return out;
  }
  RunProjection p;
  p.target = number(detail, "target").value_or(0);
  p.confidence = *confidence;
  p.loss_at_budget = *loss;
  p.loss_at_budget_lo = *lo;
  p.loss_at_budget_hi = *hi;
  p.tokens_to_target = number(detail, "tokens_to_target");
  p.tokens_to_target_lo = number(detail, "tokens_to_target_lo");
  p.tokens_to_target_hi = number(detail, "tokens_to_target_hi");
  const auto verdict = detail.find("not_reaching");
  p.not_reaching = verdict != detail.end() && verdict->is_boolean() && verdict->get<bool>();
  out.projection = p;
  return out;
}

}  // namespace mxablate::analysis
