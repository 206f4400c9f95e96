// The GEMM engine seam (gemm_engine.h) on CPU: the emulated engine's operands are the
// quantizer's values in the GEMM's layout, its product is a float64 product of those values
// times the SR pre-scale fold (which no caller passes: the engine applies it), quantized_gemm is
// the engine bit for bit, one call for both axes equals two, and routes that cannot run say so in
// one line.
#include <ATen/ATen.h>

#include <stdexcept>
#include <string>

#include "catch.h"
#include "mxablate/kernels/torch/fake_quantize.h"
#include "mxablate/kernels/torch/gemm_engine.h"
#include "mxablate/kernels/torch/quantized_gemm.h"
#include "tensor_test_util.h"

using namespace mxablate::kernels;
using mxablate::test::error_of;
using mxablate::test::spread;

namespace {

QuantSpec sr_spec(float prescale) {
  QuantSpec s{QuantFormat::kMXFP4};
  s.rounding = Rounding::kStochastic;
  s.sr_prescale = prescale;
  return s;
}

QuantSpec rotated(QuantFormat f) {
  QuantSpec s{f};
  s.hadamard = HadamardMode::kFixedRandom;
  s.hadamard_size = 32;
  return s;
}

struct Case {
  const char* name;
  GemmOperand a, b;
};

// M = 48, N = 80, K = 64, with every axis combination the three GEMMs use.
std::vector<Case> cases(at::ScalarType dtype) {
  const at::Tensor mk = spread(48, 64, 1).to(dtype), km = spread(64, 48, 2).to(dtype);
  const at::Tensor nk = spread(80, 64, 3).to(dtype), kn = spread(64, 80, 4).to(dtype);
  const RngKey ka{9, 4, 2, GemmKind::kFprop, Operand::kA}, kb{9, 4, 2, GemmKind::kFprop, Operand::kB};
  const QuantSpec mx{QuantFormat::kMXFP4}, nv{QuantFormat::kNVFP4}, e4m3{QuantFormat::kFP8E4M3},
      e5m2{QuantFormat::kFP8E5M2}, bf{QuantFormat::kBF16};
  return {{"mxfp4 rows x rows", {mk, Axis::kRows, mx, ka}, {nk, Axis::kRows, mx, kb}},
          {"nvfp4 rows x cols", {mk, Axis::kRows, nv, ka}, {kn, Axis::kCols, nv, kb}},
          {"fp8 cols x cols", {km, Axis::kCols, e5m2, ka}, {kn, Axis::kCols, e4m3, kb}},
          {"sr 3/4 x plain", {mk, Axis::kRows, sr_spec(0.75f), ka}, {nk, Axis::kRows, mx, kb}},
          {"sr 3/4 x sr 1/2", {km, Axis::kCols, sr_spec(0.75f), ka}, {kn, Axis::kCols, sr_spec(0.5f), kb}},
          {"hadamard", {mk, Axis::kRows, rotated(QuantFormat::kMXFP4), ka},
           {nk, Axis::kRows, rotated(QuantFormat::kMXFP4), kb}},
          {"bf16", {mk, Axis::kRows, bf, ka}, {kn, Axis::kCols, bf, kb}}};
}

// L(t) as the GEMM sees it, (M or N) x K, in float64.
at::Tensor logical64(const at::Tensor& q, Axis axis) {
  const at::Tensor d = q.to(at::kDouble);
  return axis == Axis::kRows ? d : d.t();
}

}  // namespace

TEST_CASE("the emulated engine's operands are the quantizer's values, (M or N) x K", "[torch][gemm][engine]") {
  const GemmEngine& engine = gemm_engine(GemmRoute::kEmulated);
  CHECK(engine.route() == GemmRoute::kEmulated);
  CHECK(engine.form() == QuantizedOperand::Form::kValues);
  for (const Case& c : cases(at::kFloat)) {
    INFO(c.name);
    for (const GemmOperand* op : {&c.a, &c.b}) {
      const QuantizedOperand q = engine.quantize_operand(*op, nullptr, at::kFloat);
      REQUIRE(q.form == QuantizedOperand::Form::kValues);
      CHECK(q.axis == op->axis);
      CHECK(q.spec.sr_prescale == op->spec.sr_prescale);
      CHECK(q.reduction() == 64);
      CHECK(q.outer() == op->tensor.size(op->axis == Axis::kRows ? 0 : 1));
      const at::Tensor fq = fake_quantize(op->tensor, op->axis, op->spec, op->key);
      CHECK(at::equal(q.source_layout(), fq));
      CHECK(at::equal(q.data, op->axis == Axis::kRows ? fq : fq.t()));
    }
  }
}

TEST_CASE("the emulated engine multiplies the values and divides the SR pre-scales back out", "[torch][gemm][engine]") {
  const GemmEngine& engine = gemm_engine(GemmRoute::kEmulated);
  for (const Case& c : cases(at::kFloat)) {
    INFO(c.name);
    const QuantizedOperand qa = engine.quantize_operand(c.a, nullptr, at::kFloat);
    const QuantizedOperand qb = engine.quantize_operand(c.b, nullptr, at::kFloat);
    const at::Tensor got = engine.multiply(qa, qb);
    CHECK(got.scalar_type() == at::kFloat);
    REQUIRE(got.sizes() == at::IntArrayRef({48, 80}));
    const at::Tensor fqa = fake_quantize(c.a.tensor, c.a.axis, c.a.spec, c.a.key);
    const at::Tensor fqb = fake_quantize(c.b.tensor, c.b.axis, c.b.spec, c.b.key);
    const double fold = 1.0 / (effective_sr_prescale(c.a.spec) * effective_sr_prescale(c.b.spec));
    const at::Tensor exact = at::mm(logical64(fqa, c.a.axis), logical64(fqb, c.b.axis).t()) * fold;
    CHECK((got.to(at::kDouble) - exact).abs().max().item<double>() <= 1e-5 * exact.abs().max().item<double>());
    if (fold != 1.0) {  // the pre-scaled values themselves make a product off by 1/fold
      const at::Tensor unfolded = at::mm(logical64(fqa, c.a.axis), logical64(fqb, c.b.axis).t());
      CHECK((got.to(at::kDouble) - unfolded).abs().max().item<double>() > 1e-2 * unfolded.abs().max().item<double>());
    }
    // An explicit dtype is the same product rounded once.
    CHECK(at::equal(engine.multiply(qa, qb, at::kBFloat16), got.to(at::kBFloat16)));
  }
}

TEST_CASE("quantized_gemm is the engine, bit for bit", "[torch][gemm][engine]") {
  const GemmEngine& engine = gemm_engine(GemmRoute::kEmulated);
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    for (const Case& c : cases(dtype)) {
      INFO(c.name << " " << dtype);
      GemmReport report;
      const at::Tensor wrapped = quantized_gemm(c.a, c.b, GemmPath::kEmulated, &report);
      QuantTelemetry ta, tb;
      const QuantizedOperand qa = engine.quantize_operand(c.a, &ta, dtype);
      const QuantizedOperand qb = engine.quantize_operand(c.b, &tb, dtype);
      const at::Tensor direct = engine.multiply(qa, qb, dtype);
      CHECK(wrapped.scalar_type() == dtype);
      CHECK(at::equal(wrapped, direct));
      CHECK(report.a.elements == ta.elements);
      CHECK(report.a.sum_sq_error == ta.sum_sq_error);
      CHECK(report.b.sum_sq_error == tb.sum_sq_error);
      CHECK(report.fp8_chunks == 0);
    }
  }
}

TEST_CASE("one engine call for both axes equals one call per axis", "[torch][gemm][engine]") {
  const GemmEngine& engine = gemm_engine(GemmRoute::kEmulated);
  const at::Tensor t = spread(96, 64, 11);
  const AxisQuantization rows{sr_spec(0.75f), {5, 1, 3, GemmKind::kFprop, Operand::kA}};
  const AxisQuantization cols{rotated(QuantFormat::kNVFP4), {5, 1, 3, GemmKind::kWgrad, Operand::kB}};
  QuantTelemetry rt, ct, rt1, ct1;
  const QuantizedAxes both = engine.quantize(t, &rows, &cols, &rt, &ct, at::kFloat);
  const QuantizedAxes r = engine.quantize(t, &rows, nullptr, &rt1, nullptr, at::kFloat);
  const QuantizedAxes c = engine.quantize(t, nullptr, &cols, nullptr, &ct1, at::kFloat);
  CHECK_FALSE(r.cols.defined());
  CHECK_FALSE(c.rows.defined());
  CHECK(at::equal(both.rows.data, r.rows.data));
  CHECK(at::equal(both.cols.data, c.cols.data));
  CHECK(both.rows.data.sizes() == at::IntArrayRef({96, 64}));
  CHECK(both.cols.data.sizes() == at::IntArrayRef({64, 96}));  // K = 96 for the down-columns use
  CHECK(both.cols.axis == Axis::kCols);
  CHECK(rt.sum_sq_error == rt1.sum_sq_error);
  CHECK(ct.sum_sq_error == ct1.sum_sq_error);
  CHECK(rt.sum_sq_error != ct.sum_sq_error);
}

TEST_CASE("engines refuse operands of another form and specs they cannot take, in one line", "[torch][gemm][engine]") {
  const GemmEngine& emulated = gemm_engine(GemmRoute::kEmulated);
  const GemmEngine& fp8 = gemm_engine(GemmRoute::kFP8Tensorwise);
  const GemmEngine& hopper = gemm_engine(GemmRoute::kHopperFP8);
  CHECK(fp8.form() == QuantizedOperand::Form::kFP8Tensorwise);
  CHECK(hopper.form() == QuantizedOperand::Form::kFP8Chunks);
  const QuantSpec mx{QuantFormat::kMXFP4}, e4m3{QuantFormat::kFP8E4M3}, e5m2{QuantFormat::kFP8E5M2};
  CHECK(emulated.operand_problem(mx, e5m2).empty());
  CHECK(fp8.operand_problem(e4m3, e5m2).empty());
  CHECK(fp8.operand_problem(e5m2, e5m2) == "the fp8-tensorwise GEMM path has no e5m2 x e5m2 kernel");
  CHECK(fp8.operand_problem(mx, e4m3) == "the fp8-tensorwise GEMM path needs fp8-e4m3 or fp8-e5m2 operands, got mxfp4");
  CHECK(hopper.operand_problem(mx, mx).empty());
  CHECK(hopper.operand_problem(mx, e4m3) == "the hopper-fp8 GEMM path needs MXFP4 operands, got fp8-e4m3");
  CHECK(hopper.shape_problem(32, 48, 64) == "the hopper-fp8 GEMM path needs K to be a multiple of 128, got 64");
  CHECK(hopper.shape_problem(32, 40, 128) ==
        "the hopper-fp8 GEMM path needs M and N to be multiples of 16, got 32 and 40");
  CHECK(hopper.shape_problem(32, 48, 128).empty());
  CHECK(fp8.shape_problem(32, 40, 128) ==
        "the fp8-tensorwise GEMM path: FP8 tensor cores need K and N to be multiples of 16, got K 128, N 40");

  const GemmOperand op{spread(32, 64, 5), Axis::kRows, mx, {}};
  const QuantizedOperand q = emulated.quantize_operand(op, nullptr, at::kFloat);
  QuantizedOperand codes = q;
  codes.form = QuantizedOperand::Form::kFP8Tensorwise;
  CHECK(error_of([&] { emulated.multiply(q, codes); }) ==
        "the emulated GEMM engine was given operands quantized by another engine");
  CHECK(error_of([&] { hopper.multiply(q, q); }) ==
        "the hopper-fp8 GEMM engine was given operands quantized by another engine");
}

TEST_CASE("a route that cannot run here is one clear line", "[torch][gemm][engine]") {
  const std::string unknown = error_of([] { gemm_engine(static_cast<GemmRoute>(2)); });
  CHECK(unknown == "gemm_engine: no GEMM route numbered 2");
  const GemmOperand mx{spread(32, 128, 6), Axis::kRows, {QuantFormat::kMXFP4}, {}};
  const std::string hopper = error_of([&] { gemm_engine(GemmRoute::kHopperFP8).quantize_operand(mx, nullptr, at::kFloat); });
  CHECK(hopper == gemm_route_unavailable_reason(GemmRoute::kHopperFP8, at::kCPU));
  const GemmOperand e4m3{spread(32, 128, 7), Axis::kRows, {QuantFormat::kFP8E4M3}, {}};
  const std::string fp8 = error_of([&] { gemm_engine(GemmRoute::kFP8Tensorwise).quantize_operand(e4m3, nullptr, at::kFloat); });
  CHECK(fp8.rfind("fp8_quantize: FP8 codes for tensor cores need a CUDA tensor", 0) == 0);
  const std::string as_fp8 = error_of([&] { gemm_engine(GemmRoute::kMXFP4AsFP8).quantize_operand(mx, nullptr, at::kFloat); });
  CHECK(as_fp8 == gemm_route_unavailable_reason(GemmRoute::kMXFP4AsFP8, at::kCPU));
  CHECK(as_fp8 == "the mxfp4-as-fp8 path needs a CUDA device and the GPU kernels");
  for (const std::string& why : {unknown, hopper, fp8, as_fp8}) {
    CHECK(why.find('\n') == std::string::npos);
    CHECK(why != "no error");
  }
}

TEST_CASE("routes have one name table", "[torch][gemm][engine]") {
  for (GemmRoute r : {GemmRoute::kEmulated, GemmRoute::kFP8Tensorwise, GemmRoute::kHopperFP8,
                      GemmRoute::kMXFP4AsFP8}) {
    CHECK(parse_gemm_route(to_string(r)) == r);
    CHECK(parse_gemm_path(to_string(r)) == r);  // quantized_gemm's spelling reads the same table
  }
  CHECK(to_string(GemmRoute::kMXFP4AsFP8) == "mxfp4-as-fp8");
  CHECK_FALSE(parse_gemm_route("native-mxfp4").has_value());  // no route without an engine
  CHECK_FALSE(parse_gemm_route("fp8").has_value());
}

TEST_CASE("mxfp4-as-fp8 runs the FP8 GEMM for shapes in multiples of 16, and multiplies values otherwise", "[torch][gemm][engine]") {
  // The host half of the route's rule; the device half (lines and scale products) is
  // fp8_line_scales_normal and the line marks, tested in gpu_kernel_model_test.
  CHECK(mxfp4_as_fp8_shape_fits(64, 64, 128));
  CHECK(mxfp4_as_fp8_shape_fits(16, 4096, 32));
  CHECK_FALSE(mxfp4_as_fp8_shape_fits(64, 40, 128));  // N = 40
  CHECK_FALSE(mxfp4_as_fp8_shape_fits(40, 64, 128));  // M = 40
  CHECK_FALSE(mxfp4_as_fp8_shape_fits(64, 64, 40));   // K = 40
  // On the CPU the route is refused in one sentence, not run on stand-ins.
  const GemmEngine& engine = gemm_engine(GemmRoute::kMXFP4AsFP8);
  const QuantSpec spec{QuantFormat::kMXFP4};
  const AxisQuantization q{spec, {}, {}};
  CHECK_THROWS_AS(engine.quantize(at::zeros({64, 64}), &q, nullptr, nullptr, nullptr, at::kFloat), std::invalid_argument);
}
