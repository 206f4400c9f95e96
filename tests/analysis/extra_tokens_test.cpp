// Extra-token cost: paired by seed, the median over seeds, an interval that says what it is (the
// range below 6 seeds, the order-statistic 95 % interval from there), the exact sign-flip test,
// and lower bounds for runs that never got there (docs/design.md §6).
#include "catch.h"
#include "mxablate/analysis/extra_tokens.h"

using namespace mxablate::analysis;

namespace {
RunOutcome seeded(std::optional<double> ttt, double trained, const std::string& key) {
  return RunOutcome(ttt, trained, key);
}

std::string key(int seed) { return "seed=" + std::to_string(seed); }
}  // namespace

TEST_CASE("unpaired: each run against the baseline's median, the range of those costs, no test") {
  const std::vector<RunOutcome> base{{100.0, 200}, {110.0, 200}, {90.0, 200}};
  const std::vector<RunOutcome> arm{{120.0, 200}, {130.0, 200}, {125.0, 200}};
  const ExtraTokenCost c = extra_token_cost(arm, base);
  CHECK_FALSE(c.paired);
  CHECK(c.runs == 3);
  CHECK(c.reached == 3);
  CHECK_FALSE(c.lower_bound);
  CHECK(*c.median_pct == Approx(25.0));  // 125 / 100 - 1
  REQUIRE(c.per_seed.size() == 3);
  CHECK(c.per_seed[0].pct == Approx(20.0));
  REQUIRE(c.interval.has_value());
  CHECK(c.interval->kind == IntervalKind::kRange);  // never an interval of the median here
  CHECK(c.interval->low == Approx(20.0));
  CHECK(c.interval->high == Approx(30.0));
  CHECK_FALSE(c.test.has_value());
}

TEST_CASE("runs with matching seeds are compared pair by pair") {
  // Seed 2 is slow in every arm (its data order): unpaired, that spread swamps the effect.
  const std::vector<RunOutcome> base{seeded(100.0, 300, "seed=1"), seeded(200.0, 300, "seed=2")};
  const std::vector<RunOutcome> arm{seeded(220.0, 300, "seed=2"), seeded(110.0, 300, "seed=1")};
  const ExtraTokenCost c = extra_token_cost(arm, base);
  CHECK(c.paired);
  CHECK(*c.median_pct == Approx(10.0));
  REQUIRE(c.per_seed.size() == 2);
  CHECK(c.per_seed[0].pair_key == "seed=2");  // the arm's run order
  REQUIRE(c.interval.has_value());
  CHECK(c.interval->kind == IntervalKind::kRange);
  CHECK(c.interval->n == 2);
  CHECK(c.interval->coverage == Approx(0.5));  // the range of two holds the median half the time
  CHECK(c.interval->low == Approx(10.0));
  CHECK(c.interval->high == Approx(10.0));
  // Both costs positive: 2 of the 4 sign patterns are as extreme.
  REQUIRE(c.test.has_value());
  CHECK(c.test->p_value == Approx(0.5));
  CHECK_FALSE(c.test->p_at_most);
  // The same runs without seeds: against the baseline median 150, -26.7 % and +46.7 %.
  const ExtraTokenCost u = extra_token_cost({{220.0, 300}, {110.0, 300}}, {{100.0, 300}, {200.0, 300}});
  CHECK_FALSE(u.paired);
  CHECK(*u.median_pct == Approx(10.0));
  CHECK(u.interval->high - u.interval->low > 50.0);
}

TEST_CASE("three seeds give the range, named as such, eight and nine the order-statistic interval") {
  std::vector<RunOutcome> base, arm;
  const double costs[] = {4, 12, 7, -1, 9, 15, 3, 10, 6};  // percent, in seed order
  for (int s = 0; s < 9; ++s) {
    base.push_back(seeded(1000.0 + 10 * s, 5000, key(s)));
    arm.push_back(seeded((1000.0 + 10 * s) * (1 + costs[s] / 100), 5000, key(s)));
  }
  const auto first = [&](size_t n) {
    return extra_token_cost({arm.begin(), arm.begin() + static_cast<long>(n)},
                            {base.begin(), base.begin() + static_cast<long>(n)});
  };
  const ExtraTokenCost three = first(3);
  REQUIRE(three.interval);
  CHECK(three.interval->kind == IntervalKind::kRange);
  CHECK(three.interval->coverage == Approx(0.75));
  CHECK(three.interval->low == Approx(4.0));
  CHECK(three.interval->high == Approx(12.0));
  CHECK(interval_kind_text(*three.interval) == "range, 3 seeds");
  CHECK(three.test->p_value == Approx(0.25));  // all positive: 2 of 8 patterns

  const ExtraTokenCost eight = first(8);  // the range of 8 covers with 1 - 2/256 >= 95 %
  CHECK(eight.interval->kind == IntervalKind::kOrderStatistics);
  CHECK(eight.interval->rank == 1);
  CHECK(eight.interval->low == Approx(-1.0));
  CHECK(eight.interval->high == Approx(15.0));
  CHECK(interval_kind_text(*eight.interval) == "95 % CI (order statistics), 8 seeds");

  const ExtraTokenCost nine = first(9);  // x_(2), x_(8) of -1 3 4 6 7 9 10 12 15
  CHECK(nine.interval->rank == 2);
  CHECK(nine.interval->coverage == Approx(1 - 2 * 10.0 / 512));
  CHECK(nine.interval->low == Approx(3.0));
  CHECK(nine.interval->high == Approx(12.0));
  CHECK(*nine.median_pct == Approx(7.0));
  // Sum 65: as extreme are the observed pattern, the one with -1 flipped (67), and their
  // negations: 4 of 512.
  CHECK(nine.test->p_value == Approx(4.0 / 512));
  CHECK(nine.test->exact);
}

TEST_CASE("runs that never reached the target make a figure a lower bound only where they move it") {
  const std::vector<RunOutcome> base{{100.0, 200}, {100.0, 200}};
  // One seed reached at 130; two never did within 141 tokens: costs >= +41 %.
  const std::vector<RunOutcome> arm{{130.0, 200}, {std::nullopt, 141}, {std::nullopt, 141}};
  const ExtraTokenCost c = extra_token_cost(arm, base);
  CHECK(c.reached == 1);
  CHECK(c.lower_bound);
  CHECK(*c.median_pct == Approx(41.0));
  CHECK_FALSE(c.interval->low_at_least);
  CHECK(c.interval->high_at_least);

  // Paired, 5 seeds, the one censored run above the median: the median is exact, the range's
  // upper end only a lower bound, and p an upper bound (the true costs can only be larger).
  std::vector<RunOutcome> b, a;
  const double costs[] = {8, 11, 9, 10};
  for (int s = 0; s < 4; ++s) {
    b.push_back(seeded(100.0, 300, key(s)));
    a.push_back(seeded(100.0 + costs[s], 300, key(s)));
  }
  b.push_back(seeded(100.0, 300, key(4)));
  a.push_back(seeded(std::nullopt, 140, key(4)));
  const ExtraTokenCost p = extra_token_cost(a, b);
  CHECK(p.paired);
  CHECK_FALSE(p.lower_bound);
  CHECK(*p.median_pct == Approx(10.0));
  CHECK(p.per_seed.back().at_least);
  CHECK(p.per_seed.back().pct == Approx(40.0));
  CHECK(p.interval->kind == IntervalKind::kRange);
  CHECK_FALSE(p.interval->low_at_least);
  CHECK(p.interval->high_at_least);
  REQUIRE(p.test);
  CHECK(p.test->p_at_most);
  CHECK(p.test->p_value == Approx(2.0 / 32));
}

TEST_CASE("a run stopped as projected not to reach the target is a lower bound with its projection") {
  RunOutcome stopped(std::nullopt, 200, "seed=1");
  stopped.projected_not_reached = true;
  RunProjection p;
  p.tokens_to_target = 300;
  p.tokens_to_target_lo = 250;
  p.tokens_to_target_hi = 400;
  stopped.projection = p;
  const ExtraTokenCost c = extra_token_cost({stopped}, {seeded(100.0, 200, "seed=1")});
  REQUIRE(c.per_seed.size() == 1);
  CHECK(c.per_seed[0].at_least);
  CHECK(c.per_seed[0].pct == Approx(100.0));  // at least its budget: +100 %
  CHECK(*c.per_seed[0].projected_pct == Approx(200.0));
  CHECK(*c.per_seed[0].projected_low_pct == Approx(150.0));
  CHECK(*c.per_seed[0].projected_high_pct == Approx(300.0));
  CHECK(c.lower_bound);
}

TEST_CASE("no baseline run reached the target: the cost is undefined") {
  const ExtraTokenCost c =
      extra_token_cost({{120.0, 200}}, {{std::nullopt, 200}, {std::nullopt, 200}});
  CHECK_FALSE(c.median_pct.has_value());
  CHECK_FALSE(c.interval.has_value());
  CHECK(c.runs == 1);
  const ExtraTokenCost empty = extra_token_cost({}, {{100.0, 200}});
  CHECK_FALSE(empty.median_pct.has_value());
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
  CHECK(c.per_seed.size() == 2);
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
