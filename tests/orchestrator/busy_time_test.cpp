// Where a slot's time went (orchestrator/busy_time.h; docs/design.md §9, "Busy slots"): the parts
// add up to the wall time whatever the attempts' spans and timings, overlapping ones included.
#include <cmath>
#include <random>

#include "catch.h"
#include "mxablate/orchestrator/busy_time.h"

using namespace mxablate::orchestrator;

namespace {

// Timings of an attempt that wrote a run_end (missing parts: std::nullopt).
AttemptTimings timed(std::optional<double> train, std::optional<double> eval = 0.0,
                     std::optional<double> checkpoint = 0.0, std::optional<double> setup = 0.0,
                     bool prestarted = false, std::optional<double> standby = std::nullopt) {
  AttemptTimings t;
  t.train_s = train;
  t.eval_s = eval;
  t.checkpoint_s = checkpoint;
  t.setup_s = setup;
  t.prestarted = prestarted;
  t.standby_s = standby;
  return t;
}

// An ended attempt on `slot` from `from` to `to`, with a run_end's timings.
AttemptSpan attempt(const std::string& slot, double from, double to, double setup, double train,
                    double eval, bool prestarted = false) {
  return {slot, from, to, timed(train, eval, 0.0, setup, prestarted, 0.0)};
}

// A slot's busy time, setup it waited for and idle time: all its wall time.
double accounted(const BusySummary& s, const SlotTime& t) {
  return t.busy_s() + t.setup_s + s.idle_s(t);
}

}  // namespace

TEST_CASE("busy time is training + evaluation + checkpoints: the union of the attempts' spans, "
          "where the rest went, and rows a store should never hold count nothing") {
  const double nan = std::nan("");
  // The one definition: all three parts, each known, finite and not negative.
  CHECK(*busy_seconds(timed(5, 1, 2)) == Approx(8));
  CHECK(!busy_seconds(timed(5, std::nullopt, 2)));  // no eval_s: an older trainer
  CHECK(!busy_seconds(timed(5, 1, std::nullopt)));
  CHECK(!busy_seconds(timed(nan, 1, 2)));
  CHECK(!busy_seconds(timed(5, -1, 2)));
  CHECK(!busy_seconds(timed(5, 1, HUGE_VAL)));
  CHECK(!busy_seconds(AttemptTimings{}));  // no run_end at all (a crash)

  // Two slots; a gap (12..20) when nothing ran (between two `mxablate run`s) is not wall time.
  const std::vector<AttemptSpan> spans{
      {"gpu0", 0, 10, timed(7, 1, 1, 0.5)},
      {"gpu1", 1, 12, timed(8, 2, 0, 1)},
      {"gpu0", 20, 30, timed(6, 1, 1, 2, true, 3)},  // prestarted: setup and wait overlapped
      {"gpu0+gpu1", 30, 32, timed(2)},               // one run of two ranks: busy on both
  };
  const BusySummary b = summarize_busy(spans, 100);
  CHECK(b.wall_s == Approx(24));
  CHECK(*b.fraction("gpu0") == Approx(19.0 / 24));
  CHECK(*b.fraction("gpu1") == Approx(12.0 / 24));
  CHECK(*b.overall() == Approx(31.0 / 48));
  CHECK(b.total_busy_s() == Approx(31));
  CHECK(b.untimed == 0);
  REQUIRE(b.slots.size() == 2);
  const SlotTime& g0 = b.slots[0];
  CHECK(g0.slot == "gpu0");
  CHECK(g0.train_s == Approx(15));
  CHECK(g0.eval_s == Approx(2));
  CHECK(g0.checkpoint_s == Approx(2));
  CHECK(g0.setup_s == Approx(0.5));           // only the setup the slot waited for
  CHECK(g0.overlapped_setup_s == Approx(2));  // the prestarted one's
  CHECK(g0.standby_s == Approx(3));
  CHECK(b.idle_s(g0) == Approx(24 - 19 - 0.5));
  CHECK(b.idle_s(b.slots[1]) == Approx(24 - 12 - 1));

  // An open attempt runs up to `now` and counts once it ends; an ended one without timings, or
  // with a part missing or hostile, is idle time.
  const BusySummary open = summarize_busy({{"cpu0", 0, std::nullopt, timed(3)},
                                           {"cpu1", 0, 4, AttemptTimings{}},
                                           {"cpu1", 4, 6, timed(1, nan)},
                                           {"cpu1", 6, 8, timed(1, 1, -1)}},
                                          10);
  CHECK(open.wall_s == Approx(10));
  CHECK(open.untimed == 3);
  CHECK(open.open == 1);
  CHECK(*open.overall() == Approx(0));
  CHECK(open.idle_s(open.slots[1]) == Approx(10));

  // Hostile spans: an end before the start, a non-finite time; busy time beyond its own span is
  // scaled down to it (parts in proportion), and setup gets only what the span leaves.
  const BusySummary hostile = summarize_busy(
      {{"cpu0", 10, 5, timed(3)},
       {"cpu0", nan, 5, timed(3)},
       {"cpu0", 0, 2, timed(-1)},
       {"cpu0", 2, 4, timed(3e8, 1e8, 0, 50)},
       {"cpu0", 4, nan, timed(1)}},
      10);
  CHECK(hostile.wall_s == Approx(4));
  CHECK(*hostile.fraction("cpu0") == Approx(0.5));  // 4e8 capped at its own 2 s span
  CHECK(hostile.slots[0].train_s == Approx(1.5));
  CHECK(hostile.slots[0].eval_s == Approx(0.5));
  CHECK(hostile.slots[0].setup_s == Approx(0));
  CHECK(hostile.idle_s(hostile.slots[0]) == Approx(2));
  CHECK(hostile.untimed == 4);
  // A slot never claims more than all its wall time.
  CHECK(*summarize_busy({{"cpu0", 0, 2, timed(2)}, {"cpu0", 1, 3, timed(2)}}, 5).fraction("cpu0") ==
        Approx(1));

  // A run's own fraction: its ended, timed attempts over their spans.
  CHECK(*run_busy_fraction({{"cpu0", 0, 10, timed(6, 1, 1)}, {"cpu0", 10, 20, AttemptTimings{}}}) ==
        Approx(0.8));
  CHECK(*run_busy_fraction({{"cpu0", 0, 10, timed(6, 1, 1)}, {"cpu0", 10, 20, timed(2, 0, 0)}}) ==
        Approx(0.5));
  CHECK(*run_busy_fraction({{"cpu0", 0, 2, timed(1e8)}}) == Approx(1));
  CHECK(!run_busy_fraction({{"cpu0", 0, std::nullopt, timed(1)}}));
  CHECK(!run_busy_fraction({{"cpu0", 5, 2, timed(1)}, {"cpu0", nan, 2, timed(1)}}));
  CHECK(!run_busy_fraction({}));

  CHECK(slot_parts("gpu0.0+gpu1.0") == std::vector<std::string>{"gpu0.0", "gpu1.0"});
  CHECK(slot_parts("cpu0+cpu1+cpu2+…+cpu15 (16 slots)").size() == 1);
  CHECK(!summarize_busy({}, 5).overall());
}

// The standby takes the slot at the finishing run's run_end while that trainer still tears down:
// the two attempts' spans overlap by the teardown. The first one's setup, capped only by its own
// span, took the teardown too, and the slot's shares added up to 102.5 % of its wall time.
TEST_CASE("a slot whose runs overlap at a handover counts the overlap once") {
  const std::vector<AttemptSpan> attempts{
      attempt("cpu0", 0.0, 1.05, 0.40, 0.6, 0.1),       // run_end at 1.0, teardown to 1.05
      attempt("cpu0", 1.0, 2.0, 0.30, 0.9, 0.1, true),  // released at 1.0, busy its whole span
  };
  const BusySummary s = summarize_busy(attempts, 3.0);
  REQUIRE(s.slots.size() == 1);
  const SlotTime& t = s.slots[0];
  CHECK(s.wall_s == Approx(2.0));
  CHECK(t.busy_s() == Approx(1.7));
  CHECK(t.setup_s == Approx(0.3));  // what the slot's wall leaves after its busy time
  CHECK(s.idle_s(t) == Approx(0.0).margin(1e-12));
  CHECK(accounted(s, t) == Approx(s.wall_s));
  CHECK(t.overlapped_setup_s == Approx(0.3));  // the standby's, shown apart
  CHECK(*s.fraction("cpu0") == Approx(0.85));
}

TEST_CASE("a slot's setup it waited for is kept where the slot's wall leaves room for it") {
  const std::vector<AttemptSpan> attempts{
      attempt("gpu0", 0.0, 1.0, 0.2, 0.5, 0.1),
      attempt("gpu0", 1.5, 2.5, 0.3, 0.6, 0.0),  // a launch gap of 0.5 s before it
  };
  const BusySummary s = summarize_busy(attempts, 3.0);
  const SlotTime& t = s.slots[0];
  CHECK(s.wall_s == Approx(2.0));
  CHECK(t.setup_s == Approx(0.5));
  CHECK(s.idle_s(t) == Approx(0.3));
}

// Hostile or skewed rows (another program's, clocks that disagree) in random shapes: every
// slot's parts are not negative and add up to the wall time whenever its busy time fits it.
TEST_CASE("a slot's parts add up to the wall time for any attempts, bounded fuzz") {
  std::mt19937_64 rng(20261202);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const std::vector<std::string> slots{"gpu0", "gpu1", "gpu0+gpu1"};
  for (int round = 0; round < 2000; ++round) {
    std::vector<AttemptSpan> attempts;
    const int n = 1 + static_cast<int>(u(rng) * 6);
    for (int i = 0; i < n; ++i) {
      const double from = u(rng) * 5, to = from + u(rng) * 2;
      attempts.push_back(attempt(slots[static_cast<size_t>(u(rng) * 3)], from, to, u(rng) * 2,
                                 u(rng) * 2, u(rng) * 0.5, u(rng) < 0.3));
    }
    const BusySummary s = summarize_busy(attempts, 10.0);
    for (const SlotTime& t : s.slots) {
      INFO("round " << round << ", slot " << t.slot);
      CHECK(t.train_s >= 0);
      CHECK(t.setup_s >= 0);
      CHECK(t.busy_s() <= s.wall_s + 1e-9);
      CHECK(accounted(s, t) == Approx(s.wall_s).margin(1e-9));
    }
  }
}
