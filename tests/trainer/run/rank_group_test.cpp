// The training loop's rank group (trainer/run/src/rank_group.h) on its own: which
// micro-batches and validation batches a rank takes, and that a group of one exchanges nothing
// (the same values back, bit for bit), so the loop needs no branch on the number of ranks.
#include <vector>

// The engine's headers first: glog (through c10d) defines a CHECK of its own, which Catch's
// must replace.
#include "rank_group.h"
#include "catch.h"

using mxablate::trainer::RankGroup;
using mxablate::trainer::RankInfo;

TEST_CASE("A rank group of one takes every batch and gives every value back as it was", "[train][ranks]") {
  const RankGroup one(RankInfo{}, nullptr, at::kCPU);
  CHECK(one.writes());
  CHECK(one.may_end_before_last_write());
  CHECK(one.my_micro_batches(4) == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(one.my_validation_batches(3) == std::vector<size_t>{0, 1, 2});
  const std::vector<double> values{0.1 + 0.2, 1e-300, -3.5};
  CHECK(one.sum(values) == values);
  CHECK(one.rank0_value(2.5) == 2.5);
  CHECK_FALSE(one.rank0_value(std::nullopt).has_value());
  CHECK(one.stop_signal(false) == 0);  // no signal received
  at::Tensor amax = at::tensor({1.0f, 2.0f});
  one.max(amax);
  CHECK(amax.equal(at::tensor({1.0f, 2.0f})));
}

TEST_CASE("Rank r of several takes the r-th slice of a step's micro-batches and every world-th validation batch",
          "[train][ranks]") {
  RankInfo rank;
  rank.rank = 1;
  rank.world = 4;
  const RankGroup second(rank, nullptr, at::kCPU);
  CHECK_FALSE(second.writes());
  CHECK(second.my_micro_batches(8) == std::vector<int64_t>{2, 3});
  CHECK(second.my_validation_batches(10) == std::vector<size_t>{1, 5, 9});
  rank.rank = 3;
  CHECK(RankGroup(rank, nullptr, at::kCPU).my_micro_batches(8) == std::vector<int64_t>{6, 7});
}
