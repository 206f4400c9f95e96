// The training order: every window once per epoch, a different order each epoch and seed, and
// a pure function of the sample number (what makes resume exact).
#include <algorithm>
#include <set>
#include <vector>

#include "catch.h"
#include "mxablate/data/sequence_sampler.h"

using namespace mxablate::data;

TEST_CASE("KeyedPermutation is a bijection for any size", "[data][sampler]") {
  for (uint64_t n : {1ull, 2ull, 3ull, 17ull, 64ull, 1000ull, 4097ull}) {
    const KeyedPermutation p(n, 42);
    std::vector<bool> seen(n, false);
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t j = p(i);
      REQUIRE(j < n);
      CHECK_FALSE(seen[j]);
      seen[j] = true;
    }
  }
}

TEST_CASE("Each epoch visits every window once, in a seed- and epoch-dependent order", "[data][sampler]") {
  const SequenceSampler s(10001, 100, 7);  // (10001 - 1) / 100 = 100 windows
  REQUIRE(s.windows_per_epoch() == 100);
  std::vector<int64_t> epoch0, epoch1;
  for (int64_t i = 0; i < 100; ++i) epoch0.push_back(s.window_start(i));
  for (int64_t i = 100; i < 200; ++i) epoch1.push_back(s.window_start(i));
  std::vector<int64_t> sorted0 = epoch0, sorted1 = epoch1;
  std::sort(sorted0.begin(), sorted0.end());
  std::sort(sorted1.begin(), sorted1.end());
  for (int64_t i = 0; i < 100; ++i) {
    CHECK(sorted0[static_cast<size_t>(i)] == i * 100);
    CHECK(sorted1[static_cast<size_t>(i)] == i * 100);
  }
  CHECK(epoch0 != epoch1);
  CHECK(epoch0 != sorted0);  // shuffled
  CHECK(s.epoch_of(150) == 1);
  const SequenceSampler other_seed(10001, 100, 8);
  int same = 0;
  for (int64_t i = 0; i < 100; ++i) same += other_seed.window_start(i) == epoch0[static_cast<size_t>(i)];
  CHECK(same < 10);
  // Pure function of the sample number: a second sampler agrees anywhere, in any order.
  const SequenceSampler again(10001, 100, 7);
  CHECK(again.window_start(137) == epoch1[37]);
  CHECK(again.window_start(5) == epoch0[5]);
}

TEST_CASE("A stream shorter than one window is an error", "[data][sampler]") {
  CHECK_THROWS_AS(SequenceSampler(100, 100, 1), std::invalid_argument);
  CHECK(SequenceSampler(101, 100, 1).windows_per_epoch() == 1);
}
