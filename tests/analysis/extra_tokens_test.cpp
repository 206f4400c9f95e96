// Extra-token cost: median over seeds, bootstrap interval, lower bounds for runs that never got
// there.
#include "catch.h"
#include "mxablate/analysis/extra_tokens.h"

using namespace mxablate::analysis;

TEST_CASE("extra-token cost is the median ratio to the baseline's median, minus one") {
  const std::vector<RunOutcome> base{{100.0, 200}, {110.0, 200}, {90.0, 200}};
  const std::vector<RunOutcome> arm{{120.0, 200}, {130.0, 200}, {125.0, 200}};
  const ExtraTokenCost c = extra_token_cost(arm, base);
  CHECK(c.runs == 3);
  CHECK(c.reached == 3);
  CHECK_FALSE(c.lower_bound);
  CHECK(*c.median_pct == Approx(25.0));  // 125 / 100 - 1
  REQUIRE(c.ci_low_pct.has_value());
  // The interval holds the estimate and lies within the extremes of what resampling can give.
  CHECK(*c.ci_low_pct <= 25.0);
  CHECK(*c.ci_high_pct >= 25.0);
  CHECK(*c.ci_low_pct >= 100.0 * (120.0 / 110.0 - 1) - 1e-9);
  CHECK(*c.ci_high_pct <= 100.0 * (130.0 / 90.0 - 1) + 1e-9);
}

TEST_CASE("the bootstrap is reproducible with its fixed seed and changes with another") {
  const std::vector<RunOutcome> base{{100.0, 300}, {108.0, 300}, {95.0, 300}, {103.0, 300},
                                     {99.0, 300}, {111.0, 300}, {97.0, 300}};
  const std::vector<RunOutcome> arm{{120.0, 300}, {150.0, 300}, {111.0, 300}, {131.0, 300},
                                    {126.0, 300}, {142.0, 300}, {117.0, 300}};
  const ExtraTokenCost a = extra_token_cost(arm, base);
  const ExtraTokenCost b = extra_token_cost(arm, base);
  CHECK(*a.ci_low_pct == *b.ci_low_pct);
  CHECK(*a.ci_high_pct == *b.ci_high_pct);
  // With few resamples the percentiles depend visibly on the draws.
  const ExtraTokenCost c = extra_token_cost(arm, base, 1, 40);
  const ExtraTokenCost d = extra_token_cost(arm, base, 2, 40);
  CHECK(*c.median_pct == *a.median_pct);
  CHECK((*c.ci_low_pct != *d.ci_low_pct || *c.ci_high_pct != *d.ci_high_pct));
}

TEST_CASE("runs that never reached the target make the figure a lower bound") {
  const std::vector<RunOutcome> base{{100.0, 200}, {100.0, 200}};
  // One seed reached at 130; two never did within 141 tokens: costs >= +41 %.
  const std::vector<RunOutcome> arm{{130.0, 200}, {std::nullopt, 141}, {std::nullopt, 141}};
  const ExtraTokenCost c = extra_token_cost(arm, base);
  CHECK(c.reached == 1);
  CHECK(c.lower_bound);
  CHECK(*c.median_pct == Approx(41.0));
}

TEST_CASE("no baseline run reached the target: the cost is undefined") {
  const ExtraTokenCost c =
      extra_token_cost({{120.0, 200}}, {{std::nullopt, 200}, {std::nullopt, 200}});
  CHECK_FALSE(c.median_pct.has_value());
  CHECK(c.runs == 1);
  const ExtraTokenCost empty = extra_token_cost({}, {{100.0, 200}});
  CHECK_FALSE(empty.median_pct.has_value());
}

namespace {
RunOutcome seeded(std::optional<double> ttt, double trained, const char* key) {
  return RunOutcome(ttt, trained, key);
}
}  // namespace

TEST_CASE("runs with matching seeds are compared pair by pair") {
  // Seed 2 is slow in every arm (its data order): unpaired, that spread swamps the effect.
  const std::vector<RunOutcome> base{seeded(100.0, 300, "seed=1"), seeded(200.0, 300, "seed=2")};
  const std::vector<RunOutcome> arm{seeded(220.0, 300, "seed=2"), seeded(110.0, 300, "seed=1")};
  const ExtraTokenCost c = extra_token_cost(arm, base);
  CHECK(c.paired);
  CHECK(*c.median_pct == Approx(10.0));
  CHECK(*c.ci_low_pct == Approx(10.0));
  CHECK(*c.ci_high_pct == Approx(10.0));
  // The same runs without seeds: against the baseline median 150, -26.7 % and +46.7 %.
  const ExtraTokenCost u = extra_token_cost({{220.0, 300}, {110.0, 300}}, {{100.0, 300}, {200.0, 300}});
  CHECK_FALSE(u.paired);
  CHECK(*u.median_pct == Approx(10.0));
  CHECK(*u.ci_high_pct - *u.ci_low_pct > 50.0);
}

TEST_CASE("a pair whose baseline never reached the target is left out, and counted") {
  const std::vector<RunOutcome> base{seeded(100.0, 300, "seed=1"), seeded(std::nullopt, 300, "seed=2"),
                                     seeded(100.0, 300, "seed=3")};
  const std::vector<RunOutcome> arm{seeded(120.0, 300, "seed=1"), seeded(250.0, 300, "seed=2"),
                                    seeded(std::nullopt, 140, "seed=3")};
  const ExtraTokenCost c = extra_token_cost(arm, base);
  CHECK(c.paired);
  CHECK(c.pairs_without_baseline == 1);
  CHECK(c.reached == 2);
  CHECK(c.lower_bound);                      // seed 3 never got there: at least +40 %
  CHECK(*c.median_pct == Approx(30.0));      // median of +20 % and >= +40 %
}

TEST_CASE("seeds that do not match one to one fall back to the unpaired estimate") {
  const std::vector<RunOutcome> base{seeded(100.0, 300, "seed=1"), seeded(100.0, 300, "seed=2")};
  CHECK_FALSE(extra_token_cost({seeded(110.0, 300, "seed=3")}, base).paired);
  CHECK_FALSE(extra_token_cost({seeded(110.0, 300, "seed=1"), seeded(120.0, 300, "seed=1")}, base).paired);
  CHECK_FALSE(extra_token_cost({seeded(110.0, 300, "seed=1")},
                               {seeded(100.0, 300, "seed=1"), seeded(90.0, 300, "seed=1")}).paired);
  CHECK(extra_token_cost({seeded(110.0, 300, "seed=1")}, base).paired);  // a subset is fine
}
