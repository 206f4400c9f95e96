// The fused producers (kernels/torch/produced_operands.h, docs/design.md §4 "Quantization in the
// producers"): SwiGLU's forward and backward that quantize their results as they write them give
// the plain kernels' h, dg and du and fake_quantize's values of them bit for bit, for every axis
// choice, rounding, rotation and edge tile; what the kernel does not take is composed instead,
// with the same bits; the raw entry points refuse what they do not take in one sentence.
#include <ATen/ATen.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "catch.h"
#include "mxablate/kernels/gpu/produce_quantize_gpu.h"
#include "mxablate/kernels/torch/produced_operands.h"

using namespace mxablate::kernels;

namespace {

at::Tensor bf16_input(int64_t rows, int64_t cols, uint64_t seed, double scale) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  at::Tensor x = at::randn({rows, cols}, gen, at::TensorOptions().dtype(at::kFloat)) * scale;
  x.select(1, cols / 3).mul_(40.0);  // an outlier column, so blocks differ in scale
  return x.to(at::kBFloat16).to(at::kCUDA);
}

bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() &&
         at::equal(a.contiguous().view(at::kShort).cpu(), b.contiguous().view(at::kShort).cpu());
}

struct Spec {
  const char* name;
  Rounding rounding;
  HadamardMode hadamard;
  ScaleRule rule;
};

QuantSpec mxfp4(const Spec& s) {
  QuantSpec q{QuantFormat::kMXFP4, s.rule, s.rounding};
  q.hadamard = s.hadamard;
  q.hadamard_size = 16;
  if (s.rounding == Rounding::kStochastic) q.sr_prescale = 0.75f;
  return q;
}

// The composition the fused kernel must equal: the values fake_quantize writes for `t`.
at::Tensor reference_values(const at::Tensor& t, Axis axis, const AxisQuantization& q) {
  return fake_quantize(t.reshape({-1, t.size(-1)}), axis, q, nullptr, at::kBFloat16);
}

void check_produced(const Produced& p, const at::Tensor& plain, const ProducedAxes& axes) {
  CHECK(p.one_pass);
  CHECK(same_bits(p.tensor, plain));
  if (axes.rows) CHECK(same_bits(p.rows, reference_values(plain, Axis::kRows, *axes.rows)));
  if (axes.cols) CHECK(same_bits(p.cols, reference_values(plain, Axis::kCols, *axes.cols)));
  CHECK(p.rows.defined() == (axes.rows != nullptr));
  CHECK(p.cols.defined() == (axes.cols != nullptr));
}

}  // namespace

TEST_CASE("Fused SwiGLU producers equal the plain kernels and the quantizer bit for bit", "[gpu][produce]") {
  const std::vector<Spec> specs = {
      {"round to nearest", Rounding::kNearest, HadamardMode::kNone, ScaleRule::kFloor},
      {"H16, deterministic", Rounding::kNearest, HadamardMode::kDeterministic, ScaleRule::kFloor},
      {"H16, per-step random", Rounding::kNearest, HadamardMode::kPerStepRandom, ScaleRule::kFloor},
      {"stochastic rounding", Rounding::kStochastic, HadamardMode::kNone, ScaleRule::kFloor},
      {"stochastic rounding, H16", Rounding::kStochastic, HadamardMode::kDeterministic, ScaleRule::kFloor},
      {"even scale rule", Rounding::kNearest, HadamardMode::kNone, ScaleRule::kEven},
  };
  // Whole tiles; rows and columns that end inside a tile; a 1.3B MLP's width (5504 = 43 x 128).
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{256, 512}, {160, 96}, {96, 1376}, {128, 5504}};
  for (const Spec& spec : specs) {
    for (const auto& [rows, cols] : shapes) {
      DYNAMIC_SECTION(spec.name << ", " << rows << " x " << cols) {
        const at::Tensor g = bf16_input(rows, cols, 1 + rows, 2.0);
        const at::Tensor u = bf16_input(rows, cols, 2 + cols, 1.0);
        const at::Tensor dh = bf16_input(rows, cols, 3 + rows * cols, 1e-3);
        const AxisQuantization qr{mxfp4(spec), RngKey{11, 3, 7, GemmKind::kFprop, Operand::kA}};
        const AxisQuantization qc{mxfp4(spec), RngKey{11, 3, 7, GemmKind::kWgrad, Operand::kB}};
        const AxisQuantization qr2{mxfp4(spec), RngKey{11, 3, 8, GemmKind::kDgrad, Operand::kA}};
        const AxisQuantization qc2{mxfp4(spec), RngKey{11, 3, 8, GemmKind::kWgrad, Operand::kA}};
        const at::Tensor h = swiglu_forward(g, u, at::kBFloat16);
        const SwiGluGrads grads = swiglu_backward(dh, g, u);
        for (const ProducedAxes& axes : {ProducedAxes{&qr, &qc}, ProducedAxes{&qr, nullptr}, ProducedAxes{nullptr, &qc}}) {
          check_produced(swiglu_forward_quantized(g, u, at::kBFloat16, axes, at::kBFloat16), h, axes);
        }
        // dg with both axes, du with rows only (and the other way round): each its own job.
        const ProducedAxes both{&qr, &qc}, rows_only{&qr2, nullptr}, cols_only{nullptr, &qc2};
        const ProducedGrads a = swiglu_backward_quantized(dh, g, u, both, rows_only, at::kBFloat16);
        check_produced(a.dg, grads.dg, both);
        check_produced(a.du, grads.du, rows_only);
        const ProducedGrads b = swiglu_backward_quantized(dh, g, u, cols_only, both, at::kBFloat16);
        check_produced(b.dg, grads.dg, cols_only);
        check_produced(b.du, grads.du, both);
      }
    }
  }
}

TEST_CASE("What the fused producers do not take is composed, with the same bits", "[gpu][produce]") {
  const at::Tensor g = bf16_input(64, 256, 5, 2.0), u = bf16_input(64, 256, 6, 1.0), dh = bf16_input(64, 256, 7, 1e-3);
  const AxisQuantization rtn{mxfp4({"", Rounding::kNearest, HadamardMode::kNone, ScaleRule::kFloor}), RngKey{1, 1, 1}};
  const AxisQuantization sr{mxfp4({"", Rounding::kStochastic, HadamardMode::kNone, ScaleRule::kFloor}),
                            RngKey{1, 1, 1, GemmKind::kWgrad, Operand::kA}};
  QuantSpec nv = rtn.spec;
  nv.format = QuantFormat::kNVFP4;
  const AxisQuantization nvfp4{nv, RngKey{1, 1, 1}};
  const at::Tensor h = swiglu_forward(g, u, at::kBFloat16);
  SECTION("two roundings in one launch") {
    const ProducedAxes axes{&rtn, &sr};
    const Produced p = swiglu_forward_quantized(g, u, at::kBFloat16, axes, at::kBFloat16);
    CHECK_FALSE(p.one_pass);
    CHECK(same_bits(p.tensor, h));
    CHECK(same_bits(p.rows, reference_values(h, Axis::kRows, rtn)));
    CHECK(same_bits(p.cols, reference_values(h, Axis::kCols, sr)));
  }
  SECTION("another format") {
    const Produced p = swiglu_forward_quantized(g, u, at::kBFloat16, ProducedAxes{&nvfp4, nullptr}, at::kBFloat16);
    CHECK_FALSE(p.one_pass);
    CHECK(same_bits(p.rows, reference_values(h, Axis::kRows, nvfp4)));
  }
  SECTION("float32 results") {
    const Produced p = swiglu_forward_quantized(g, u, at::kFloat, ProducedAxes{&rtn, nullptr}, at::kFloat);
    CHECK_FALSE(p.one_pass);
    CHECK(at::equal(p.tensor, swiglu_forward(g, u, at::kFloat)));
  }
  SECTION("a row length that is not a multiple of 8") {
    // Down columns, 36 columns are fine for MXFP4 (the blocks run down the 64 rows), but the
    // kernel's 16-byte vectors are not: composed.
    const at::Tensor g2 = bf16_input(64, 36, 8, 2.0), u2 = bf16_input(64, 36, 9, 1.0);
    const Produced p = swiglu_forward_quantized(g2, u2, at::kBFloat16, ProducedAxes{nullptr, &rtn}, at::kBFloat16);
    CHECK_FALSE(p.one_pass);
    const at::Tensor h2 = swiglu_forward(g2, u2, at::kBFloat16);
    CHECK(same_bits(p.tensor, h2));
    CHECK(same_bits(p.cols, reference_values(h2, Axis::kCols, rtn)));
    // Along rows, 36 is no multiple of 32: refused by the quantizer's own check, as without fusion.
    CHECK_THROWS_AS(swiglu_forward_quantized(g2, u2, at::kBFloat16, ProducedAxes{&rtn, nullptr}, at::kBFloat16),
                    std::invalid_argument);
  }
  SECTION("the backward pass, two roundings") {
    const SwiGluGrads grads = swiglu_backward(dh, g, u);
    const ProducedGrads p =
        swiglu_backward_quantized(dh, g, u, ProducedAxes{&rtn, nullptr}, ProducedAxes{nullptr, &sr}, at::kBFloat16);
    CHECK_FALSE(p.dg.one_pass);
    CHECK(same_bits(p.dg.tensor, grads.dg));
    CHECK(same_bits(p.du.cols, reference_values(grads.du, Axis::kCols, sr)));
  }
}

TEST_CASE("The raw fused producers refuse what they do not take", "[gpu][produce]") {
  using gpu::AxisJob;
  const at::Tensor g = bf16_input(64, 64, 1, 1.0), u = bf16_input(64, 64, 2, 1.0);
  at::Tensor h = at::empty_like(g), values = at::empty_like(g);
  const auto bits = [](const at::Tensor& t) { return static_cast<uint16_t*>(t.data_ptr()); };
  AxisJob rows{QuantSpec{}, RngKey{}, {}, {}};
  rows.out.dequant_bf16 = bits(values);
  gpu::SwiGluQuantizeJob job;
  job.g = bits(g);
  job.u = bits(u);
  job.rows = 64;
  job.cols = 64;
  job.h.out = bits(h);
  job.h.along_rows = &rows;
  REQUIRE_NOTHROW(gpu::swiglu_forward_quantize(job, nullptr));
  SECTION("codes are not a producer's output") {
    at::Tensor packed = at::empty({64, 32}, g.options().dtype(at::kByte));
    rows.out.packed = static_cast<uint8_t*>(packed.data_ptr());
    CHECK_THROWS_AS(gpu::swiglu_forward_quantize(job, nullptr), std::invalid_argument);
  }
  SECTION("fp8") {
    rows.spec.format = QuantFormat::kFP8E4M3;
    CHECK_THROWS_AS(gpu::swiglu_forward_quantize(job, nullptr), std::invalid_argument);
    CHECK_FALSE(gpu::produced_axis_problem(rows.spec, Axis::kRows, 64, 64).empty());
  }
  SECTION("a misaligned input") {
    job.g = bits(g) + 1;
    CHECK_THROWS_AS(gpu::swiglu_forward_quantize(job, nullptr), std::invalid_argument);
  }
  SECTION("no rows") {
    job.rows = 0;
    CHECK_THROWS_AS(gpu::swiglu_forward_quantize(job, nullptr), std::invalid_argument);
  }
}
