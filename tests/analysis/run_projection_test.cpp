// Reading the trainer's projection events into a run's projected outcome (run_projection.h).
#include "catch.h"
#include "mxablate/analysis/run_projection.h"

using namespace mxablate::analysis;
using nlohmann::json;

TEST_CASE("a projection event's detail becomes the run's projection, or the reason it has none") {
  const json detail = {{"target", 3.3},           {"confidence", 0.95},
                       {"points", 7},             {"loss_at_budget", 3.5},
                       {"loss_at_budget_lo", 3.45}, {"loss_at_budget_hi", 3.56},
                       {"tokens_to_target", nullptr}, {"tokens_to_target_lo", 4.2e8},
                       {"tokens_to_target_hi", nullptr}, {"not_reaching", true},
                       {"streak", 3}};
  const ProjectionRecord r = projection_from_detail(detail);
  REQUIRE(r.projection);
  CHECK(r.projection->target == 3.3);
  CHECK(r.projection->loss_at_budget_lo == 3.45);
  CHECK_FALSE(r.projection->tokens_to_target);
  CHECK(r.projection->tokens_to_target_lo == 4.2e8);
  CHECK(r.projection->not_reaching);

  const ProjectionRecord none = projection_from_detail({{"target", 3.3}, {"no_projection", "6 needed to fit"}});
  CHECK_FALSE(none.projection);
  CHECK(none.no_projection_reason == "6 needed to fit");
  // A store anyone may have written: a wrong type is no projection, never an exception.
  const ProjectionRecord bad = projection_from_detail({{"loss_at_budget", "low"}});
  CHECK_FALSE(bad.projection);
  CHECK(bad.no_projection_reason == "its projection event is not readable");
  CHECK_FALSE(projection_from_detail(json::array()).projection);
}
