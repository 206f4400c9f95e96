// FP8 delayed scaling in the CPU reference (docs/design.md §3, "FP8, per-tensor delayed
// scaling"): the decode scale comes from the window's amax (times 2^margin), values beyond it
// saturate, an empty window scales as current scaling does, a non-finite tensor is NaN whatever
// the window, and every call records its tensor's amax into the instance's slot as a maximum.
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "catch.h"
#include "mxablate/kernels/block_scaling.h"
#include "mxablate/kernels/quantize.h"
#include "quant_test_util.h"

using namespace mxablate::kernels;
using mxablate::test::activation_like;
using mxablate::test::run_quantize;
using mxablate::test::same_bits;

namespace {

QuantSpec fp8(QuantFormat f) {
  QuantSpec s;
  s.format = f;
  return s;
}

int32_t bits_of(float x) {
  int32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

}  // namespace

TEST_CASE("Delayed scaling with an empty window is current scaling, and records the amax") {
  const auto x = activation_like(16, 32, 7);
  for (QuantFormat f : {QuantFormat::kFP8E4M3, QuantFormat::kFP8E5M2}) {
    for (Axis axis : {Axis::kRows, Axis::kCols}) {
      const int32_t window = kNoAmax;
      int32_t record = kNoAmax;
      const auto current = run_quantize(x, 16, 32, axis, fp8(f));
      const auto delayed = run_quantize(x, 16, 32, axis, fp8(f), {}, Fp8DelayedScale{&window, &record, 0});
      CHECK(delayed.packed == current.packed);
      CHECK(same_bits(delayed.dequant, current.dequant));
      CHECK(bits_of(delayed.tensor_scale) == bits_of(current.tensor_scale));
      float amax = 0;
      for (float v : x) amax = std::max(amax, std::fabs(v));
      CHECK(record == bits_of(amax));
    }
  }
}

TEST_CASE("Delayed scaling takes d from the window, times 2^margin, and saturates beyond it") {
  // Window amax 448: d = 1 for E4M3, so codes are the values themselves; 600 saturates to 448.
  std::vector<float> x = {1.0f, -2.5f, 600.0f, 0.0f, 3.0f, -1000.0f, 0.125f, 7.0f};
  const int32_t window = bits_of(448.0f);
  int32_t record = kNoAmax;
  const auto q = run_quantize(x, 1, 8, Axis::kRows, fp8(QuantFormat::kFP8E4M3), {},
                              Fp8DelayedScale{&window, &record, 0});
  CHECK(q.tensor_scale == 1.0f);
  CHECK(q.dequant == std::vector<float>{1.0f, -2.5f, 448.0f, 0.0f, 3.0f, -448.0f, 0.125f, 7.0f});
  CHECK(q.packed[2] == 0x7E);  // E4M3's largest finite code
  CHECK(q.packed[5] == 0xFE);
  CHECK(q.telemetry.saturated == 2);
  CHECK(record == bits_of(1000.0f));  // the current amax, not the window's
  // Under current scaling the same tensor would have d = 1000 / 448 and no saturation.
  const auto current = run_quantize(x, 1, 8, Axis::kRows, fp8(QuantFormat::kFP8E4M3));
  CHECK(current.tensor_scale == 1000.0f / 448.0f);
  CHECK(current.telemetry.saturated == 0);
  // A margin of 2 multiplies d by 4: 600 and -1000 now fit (1000 / 4 = 250 <= 448).
  int32_t again = kNoAmax;
  const auto margin = run_quantize(x, 1, 8, Axis::kRows, fp8(QuantFormat::kFP8E4M3), {},
                                   Fp8DelayedScale{&window, &again, 2});
  CHECK(margin.tensor_scale == 4.0f);
  CHECK(margin.telemetry.saturated == 0);
  CHECK(margin.dequant[5] == -1024.0f);  // 250 rounds to E4M3 256, times 4
  CHECK(margin.dequant[6] == 0.125f);    // 0.03125 is exact in E4M3
  // E5M2: d = window / 57344.
  const int32_t wide = bits_of(57344.0f * 2);
  int32_t r5 = kNoAmax;
  const auto e5 = run_quantize(x, 1, 8, Axis::kRows, fp8(QuantFormat::kFP8E5M2), {}, Fp8DelayedScale{&wide, &r5, 0});
  CHECK(e5.tensor_scale == 2.0f);
  CHECK(e5.dequant[5] == -1024.0f);  // 500 rounds to E5M2 512
}

TEST_CASE("The recorded amax is a maximum over the calls that share a slot") {
  const int32_t window = bits_of(10.0f);
  int32_t record = bits_of(50.0f);  // an earlier micro-batch of the step saw 50
  std::vector<float> x(16, 1.0f);
  x[3] = -20.0f;
  run_quantize(x, 4, 4, Axis::kCols, fp8(QuantFormat::kFP8E4M3), {}, Fp8DelayedScale{&window, &record, 0});
  CHECK(record == bits_of(50.0f));
  x[3] = -80.0f;
  run_quantize(x, 4, 4, Axis::kCols, fp8(QuantFormat::kFP8E4M3), {}, Fp8DelayedScale{&window, &record, 0});
  CHECK(record == bits_of(80.0f));
  // An all-zero tensor records 0, above "nothing recorded".
  int32_t empty = kNoAmax;
  run_quantize(std::vector<float>(16, 0.0f), 4, 4, Axis::kRows, fp8(QuantFormat::kFP8E4M3), {},
               Fp8DelayedScale{&window, &empty, 0});
  CHECK(empty == 0);
}

TEST_CASE("A non-finite tensor is NaN whatever the window, and records the non-finite amax") {
  std::vector<float> x(16, 1.0f);
  x[5] = std::numeric_limits<float>::infinity();
  const int32_t window = bits_of(448.0f);
  int32_t record = bits_of(3.0f);
  const auto q = run_quantize(x, 4, 4, Axis::kRows, fp8(QuantFormat::kFP8E4M3), {}, Fp8DelayedScale{&window, &record, 0});
  CHECK(std::isnan(q.tensor_scale));
  for (float v : q.dequant) CHECK(std::isnan(v));
  for (uint8_t c : q.packed) CHECK(c == 0x7F);  // E4M3's NaN code
  CHECK(q.telemetry.nonfinite_blocks == 1);
  CHECK(record == kNonfiniteAmax);  // above every finite amax: the max keeps it
  // A window that holds a non-finite amax makes every later scale NaN, codes NaN: never a
  // silently finite tensor (the step that recorded it already ended the run, docs/design.md §3).
  const int32_t poisoned = kNonfiniteAmax;
  int32_t r2 = kNoAmax;
  const auto p = run_quantize(std::vector<float>(16, 1.0f), 4, 4, Axis::kRows, fp8(QuantFormat::kFP8E4M3), {},
                              Fp8DelayedScale{&poisoned, &r2, 0});
  CHECK(std::isnan(p.tensor_scale));
  CHECK(std::isnan(p.dequant[0]));
  CHECK(r2 == bits_of(1.0f));
}

TEST_CASE("The delayed scale rule on its own: window, empty window, margin, non-finite") {
  CHECK(fp8_delayed_scale(bits_of(896.0f), 5.0f, false, 0, kE4M3) == 2.0f);
  CHECK(fp8_delayed_scale(kNoAmax, 896.0f, false, 0, kE4M3) == 2.0f);
  CHECK(fp8_delayed_scale(kNoAmax, 0.0f, false, 0, kE4M3) == 1.0f);  // all zeros: as current scaling
  CHECK(fp8_delayed_scale(0, 3.0f, false, 3, kE4M3) == 8.0f);        // a window of zeros: d = 1 * 2^3
  CHECK(fp8_delayed_scale(bits_of(896.0f), 5.0f, false, 8, kE4M3) == 512.0f);
  CHECK(std::isnan(fp8_delayed_scale(bits_of(896.0f), 5.0f, true, 0, kE4M3)));
  CHECK(std::isfinite(fp8_delayed_scale(bits_of(std::numeric_limits<float>::max()), 1.0f, false, kMaxFp8Margin, kE4M3)));
  CHECK(fp8_amax_record(std::numeric_limits<float>::max(), false) < kNonfiniteAmax);
  CHECK(fp8_amax_record(0.0f, false) > kNoAmax);
}

TEST_CASE("Delayed scaling is refused where it does not apply") {
  const int32_t window = kNoAmax;
  int32_t record = kNoAmax;
  const std::vector<float> x(32, 1.0f);
  const auto refused = [&](QuantFormat f, Fp8DelayedScale d) {
    try {
      run_quantize(x, 1, 32, Axis::kRows, fp8(f), {}, d);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK(refused(QuantFormat::kMXFP4, {&window, &record, 0}) ==
        "delayed scaling applies to fp8-e4m3 and fp8-e5m2 only, got mxfp4");
  CHECK(refused(QuantFormat::kFP8E4M3, {&window, nullptr, 0}) ==
        "delayed scaling needs where to record the tensor's amax");
  CHECK(refused(QuantFormat::kFP8E4M3, {&window, &record, 9}) == "delayed scaling's margin must be in [0, 8], got 9");
  CHECK(refused(QuantFormat::kFP8E4M3, {&window, &record, -1}) == "delayed scaling's margin must be in [0, 8], got -1");
  CHECK(refused(QuantFormat::kMXFP4, {}) == "accepted");  // current scaling: nothing to refuse
}
