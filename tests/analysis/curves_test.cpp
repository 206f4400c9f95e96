// Tokens to target on hand-made evaluation curves.
#include <cmath>
#include <limits>

#include "catch.h"
#include "mxablate/analysis/curves.h"

using namespace mxablate::analysis;

TEST_CASE("tokens to target: linear interpolation between the evaluations around the crossing") {
  const Curve c{{100, 5.0}, {200, 4.0}, {300, 3.0}};
  CHECK(*tokens_to_target(c, 3.5) == Approx(250));
  CHECK(*tokens_to_target(c, 3.9) == Approx(210));
}

TEST_CASE("tokens to target: crossing exactly at an evaluation") {
  const Curve c{{100, 5.0}, {200, 4.0}, {300, 3.0}};
  CHECK(*tokens_to_target(c, 4.0) == 200);
  CHECK(*tokens_to_target(c, 5.0) == 100);  // already there at the first evaluation
  CHECK(*tokens_to_target(c, 9.0) == 100);
}

TEST_CASE("tokens to target: never crossing") {
  const Curve c{{100, 5.0}, {200, 4.0}, {300, 3.5}};
  CHECK_FALSE(tokens_to_target(c, 3.4).has_value());
  CHECK_FALSE(tokens_to_target(Curve{}, 3.0).has_value());
}

TEST_CASE("tokens to target: the first crossing counts, even if the loss rises again") {
  const Curve c{{100, 5.0}, {200, 3.0}, {300, 4.0}, {400, 2.0}};
  CHECK(*tokens_to_target(c, 3.5) == Approx(175));
}

TEST_CASE("tokens to target: a run that diverged before the target has none") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  CHECK_FALSE(tokens_to_target(Curve{{100, 5.0}, {200, nan}, {300, 2.0}}, 3.0).has_value());
  CHECK_FALSE(tokens_to_target(Curve{{100, 5.0}, {200, inf}}, 3.0).has_value());
  // Reached before diverging: it counts.
  CHECK(*tokens_to_target(Curve{{100, 5.0}, {200, 3.0}, {300, nan}}, 4.0) == Approx(150));
}

TEST_CASE("loss at a token count and a target derived from a baseline arm") {
  const Curve a{{0, 10.0}, {100, 6.0}, {200, 4.0}};
  CHECK(*loss_at(a, 150) == Approx(5.0));
  CHECK(*loss_at(a, 200) == 4.0);
  CHECK_FALSE(loss_at(a, 250).has_value());
  const Curve b{{0, 10.0}, {100, 7.0}, {200, 5.0}};
  const Curve c{{0, 10.0}, {100, 8.0}, {200, 6.0}};
  // At 80 % of a 200-token budget (160 tokens): 4.8, 5.8, 6.8 → median 5.8.
  CHECK(*target_from_baseline({a, b, c}, 200, 0.8) == Approx(5.8));
  CHECK_FALSE(target_from_baseline({}, 200, 0.8).has_value());
  CHECK(median({3, 1, 2, 10}) == 2.5);
}
