// kernels/torch fake_quantize on CPU: the adapter must reproduce the CPU reference bit for bit for
// float32 and bf16 tensors, contiguous or not, on both axes, and refuse bad input in one sentence.
#include <ATen/ATen.h>

#include <cstring>
#include <optional>
#include <stdexcept>
#include <vector>

#include "catch.h"
#include "mxablate/kernels/quantize.h"
#include "mxablate/kernels/torch/fake_quantize.h"
#include "test_tensors.h"

using namespace mxablate::kernels;
using mxablate::test::adversarial_matrix;
using mxablate::test::same_bits;

namespace {

// The CPU reference on the same values, as a float32 tensor (float32 output) or bf16 (bf16 output).
at::Tensor reference(const at::Tensor& x, Axis axis, const QuantSpec& spec, const RngKey& key,
                     QuantTelemetry* telemetry = nullptr,
                     std::optional<at::ScalarType> out_dtype = std::nullopt) {
  const at::Tensor in = x.to(at::kFloat).contiguous();
  const int64_t rows = x.size(0), cols = x.size(1);
  std::vector<float> f32(static_cast<size_t>(rows * cols));
  std::vector<uint16_t> b16(f32.size());
  QuantOutputs out;
  out.dequant = f32.data();
  out.dequant_bf16 = b16.data();
  const QuantTelemetry t = quantize(in.data_ptr<float>(), rows, cols, axis, spec, key, out);
  if (telemetry) *telemetry = t;
  if (out_dtype.value_or(x.scalar_type()) == at::kFloat) return at::from_blob(f32.data(), {rows, cols}, at::kFloat).clone();
  at::Tensor r = at::empty({rows, cols}, at::kBFloat16);
  std::memcpy(r.data_ptr(), b16.data(), b16.size() * sizeof(uint16_t));
  return r;
}

std::vector<QuantSpec> specs_under_test() {
  std::vector<QuantSpec> specs;
  for (ScaleRule rule : {ScaleRule::kFloor, ScaleRule::kCeil, ScaleRule::kEven})
    specs.push_back({QuantFormat::kMXFP4, rule, Rounding::kNearest, HadamardMode::kNone, 16});
  specs.push_back({QuantFormat::kMXFP4, ScaleRule::kFloor, Rounding::kStochastic, HadamardMode::kNone, 16});
  specs.push_back({QuantFormat::kMXFP4, ScaleRule::kFloor, Rounding::kNearest, HadamardMode::kDeterministic, 16});
  specs.push_back({QuantFormat::kMXFP4, ScaleRule::kEven, Rounding::kStochastic, HadamardMode::kPerStepRandom, 64});
  specs.push_back({QuantFormat::kNVFP4, ScaleRule::kFloor, Rounding::kNearest, HadamardMode::kNone, 16});
  specs.push_back({QuantFormat::kFP8E4M3, ScaleRule::kFloor, Rounding::kNearest, HadamardMode::kNone, 16});
  specs.push_back({QuantFormat::kFP8E5M2, ScaleRule::kFloor, Rounding::kStochastic, HadamardMode::kNone, 16});
  specs.push_back({QuantFormat::kBF16, ScaleRule::kFloor, Rounding::kNearest, HadamardMode::kNone, 16});
  return specs;
}

}  // namespace

TEST_CASE("fake_quantize on CPU equals the CPU reference bit for bit", "[torch][fake_quantize]") {
  const RngKey key{1234, 7, 3, GemmKind::kWgrad, Operand::kB};
  for (bool nonfinite : {false, true}) {
    const at::Tensor x32 = adversarial_matrix(128, 128, 11, nonfinite);
    for (const at::Tensor& x : {x32, x32.to(at::kBFloat16)}) {
      for (Axis axis : {Axis::kRows, Axis::kCols}) {
        for (const QuantSpec& spec : specs_under_test()) {
          INFO("dtype " << x.scalar_type() << " axis " << to_string(axis) << " format "
                        << to_string(spec.format) << " hadamard " << to_string(spec.hadamard));
          QuantTelemetry got_t, want_t;
          const at::Tensor got = fake_quantize(x, axis, spec, key, &got_t);
          const at::Tensor want = reference(x, axis, spec, key, &want_t);
          CHECK(got.scalar_type() == x.scalar_type());
          CHECK(got.sizes() == x.sizes());
          CHECK(same_bits(got, want));
          CHECK(got_t.elements == want_t.elements);
          CHECK(got_t.saturated == want_t.saturated);
          CHECK(got_t.flushed == want_t.flushed);
          CHECK(got_t.nonfinite_blocks == want_t.nonfinite_blocks);
          CHECK(got_t.sum_sq_error == want_t.sum_sq_error);
        }
      }
    }
  }
}

TEST_CASE("fake_quantize writes the asked dtype, bit for bit the reference's", "[torch][fake_quantize]") {
  const RngKey key{77, 3, 2, GemmKind::kDgrad, Operand::kA};
  const at::Tensor x32 = adversarial_matrix(64, 128, 13, true);
  for (const at::Tensor& x : {x32, x32.to(at::kBFloat16)}) {
    for (at::ScalarType out : {at::kFloat, at::kBFloat16}) {
      for (const QuantSpec& spec : specs_under_test()) {
        INFO("input " << x.scalar_type() << " output " << out << " format " << to_string(spec.format));
        const at::Tensor got = fake_quantize(x, Axis::kCols, spec, key, nullptr, out);
        CHECK(got.scalar_type() == out);
        CHECK(same_bits(got, reference(x, Axis::kCols, spec, key, nullptr, out)));
      }
      const AxisQuantization rows{{QuantFormat::kMXFP4}, {5, 2, 1, GemmKind::kFprop, Operand::kA}};
      const AxisQuantization cols{{QuantFormat::kMXFP4, ScaleRule::kFloor, Rounding::kStochastic,
                                   HadamardMode::kDeterministic, 16},
                                  {5, 2, 1, GemmKind::kWgrad, Operand::kB}};
      const BothAxes both = fake_quantize_both(x, rows, cols, nullptr, nullptr, out);
      CHECK(same_bits(both.rows, reference(x, Axis::kRows, rows.spec, rows.key, nullptr, out)));
      CHECK(same_bits(both.cols, reference(x, Axis::kCols, cols.spec, cols.key, nullptr, out)));
    }
  }
  // MX values (E2M1 times a power of two) are exact in BF16 within its range: nothing is lost
  // by asking for BF16.
  at::manual_seed(3);
  const at::Tensor normal = at::randn({64, 128}) * 3;
  const QuantSpec mx{QuantFormat::kMXFP4, ScaleRule::kFloor, Rounding::kStochastic};
  CHECK(same_bits(fake_quantize(normal, Axis::kRows, mx, key, nullptr, at::kBFloat16).to(at::kFloat),
                  fake_quantize(normal, Axis::kRows, mx, key)));
  CHECK_THROWS_AS(fake_quantize(x32, Axis::kRows, mx, key, nullptr, at::kHalf), std::invalid_argument);
}

TEST_CASE("fake_quantize reads non-contiguous views by their logical layout", "[torch][fake_quantize]") {
  const QuantSpec spec{QuantFormat::kMXFP4, ScaleRule::kFloor, Rounding::kStochastic,
                       HadamardMode::kFixedRandom, 32};
  const RngKey key{99, 1, 0, GemmKind::kDgrad, Operand::kB};
  const at::Tensor base = adversarial_matrix(96, 64, 5, false);
  const at::Tensor view = base.t();  // 64 x 96, column-major storage
  REQUIRE_FALSE(view.is_contiguous());
  const at::Tensor got = fake_quantize(view, Axis::kCols, spec, key);
  CHECK(got.is_contiguous());
  CHECK(same_bits(got, fake_quantize(view.contiguous(), Axis::kCols, spec, key)));
}

TEST_CASE("fake_quantize_both equals one fake_quantize per axis", "[torch][fake_quantize]") {
  const at::Tensor x = adversarial_matrix(128, 64, 21, true).to(at::kBFloat16);
  const AxisQuantization rows{{QuantFormat::kMXFP4}, {5, 2, 1, GemmKind::kFprop, Operand::kA}};
  const AxisQuantization cols{{QuantFormat::kMXFP4, ScaleRule::kFloor, Rounding::kStochastic,
                               HadamardMode::kDeterministic, 16},
                              {5, 2, 1, GemmKind::kWgrad, Operand::kB}};
  QuantTelemetry tr, tc;
  const BothAxes both = fake_quantize_both(x, rows, cols, &tr, &tc);
  CHECK(same_bits(both.rows, fake_quantize(x, Axis::kRows, rows.spec, rows.key)));
  CHECK(same_bits(both.cols, fake_quantize(x, Axis::kCols, cols.spec, cols.key)));
  CHECK(tr.elements == 128 * 64);
  CHECK(tc.elements == 128 * 64);
  CHECK(tc.nonfinite_blocks > 0);
}

TEST_CASE("fake_quantize refuses bad input with one sentence", "[torch][fake_quantize]") {
  const QuantSpec mx{QuantFormat::kMXFP4};
  const RngKey key{};
  CHECK_THROWS_AS(fake_quantize(at::zeros({4, 32, 2}), Axis::kRows, mx, key), std::invalid_argument);
  CHECK_THROWS_AS(fake_quantize(at::zeros({4, 32}, at::kDouble), Axis::kRows, mx, key),
                  std::invalid_argument);
  CHECK_THROWS_AS(fake_quantize(at::zeros({4, 48}), Axis::kRows, mx, key), std::invalid_argument);
  CHECK_THROWS_AS(fake_quantize(at::zeros({4, 64}), Axis::kCols, mx, key), std::invalid_argument);
  try {
    fake_quantize(at::zeros({4, 48}), Axis::kRows, mx, key);
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    CHECK(message.find("48") != std::string::npos);
    CHECK(message.find('\n') == std::string::npos);
  }
}
