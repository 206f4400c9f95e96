// Telemetry: relative error, saturation, flush-to-zero and bias on hand-computed blocks.
#include <cmath>

#include "catch.h"
#include "mxablate/kernels/quantize.h"
#include "quant_test_util.h"

using namespace mxablate::kernels;
using mxablate::test::run_quantize;

TEST_CASE("telemetry counts what happened to each element") {
  // Block: 7 (saturates to 6), 0.2 (flushes to 0), 0 (zero input), 29 x 1.25 (ties to 1.0).
  std::vector<float> x(32, 1.25f);
  x[0] = 7.0f;
  x[1] = 0.2f;
  x[2] = 0.0f;
  QuantSpec spec;
  const auto q = run_quantize(x, 1, 32, Axis::kRows, spec);
  const QuantTelemetry& t = q.telemetry;
  CHECK(t.elements == 32);
  CHECK(t.nonzero_inputs == 31);
  CHECK(t.saturated == 1);
  CHECK(t.flushed == 1);
  const double sum_err = (6.0 - 7.0) + (0.0 - 0.2) + 29 * (1.0 - 1.25);
  const double sum_sq_err = 1.0 + 0.2f * 0.2f + 29 * 0.0625;
  const double sum_sq_in = 49.0 + 0.2f * 0.2f + 29 * 1.5625;
  CHECK(t.mean_error() == Approx(sum_err / 32).epsilon(1e-7));
  CHECK(t.relative_error() == Approx(std::sqrt(sum_sq_err / sum_sq_in)).epsilon(1e-7));
  CHECK(t.fraction_saturated() == Approx(1.0 / 32));
  CHECK(t.fraction_flushed() == Approx(1.0 / 31));
}

TEST_CASE("telemetry merges additively and is zero-safe") {
  QuantTelemetry empty;
  CHECK(empty.relative_error() == 0.0);
  CHECK(empty.fraction_flushed() == 0.0);
  QuantTelemetry a;
  a.elements = 10;
  a.saturated = 2;
  a.sum_sq_error = 1;
  a.sum_sq_input = 4;
  QuantTelemetry b = a;
  b.merge(a);
  CHECK(b.elements == 20);
  CHECK(b.saturated == 4);
  CHECK(b.relative_error() == Approx(0.5));
}
