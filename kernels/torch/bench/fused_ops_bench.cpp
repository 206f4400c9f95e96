#include "fused_ops_bench.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <cstdint>
#include <sstream>
#include <vector>

#include "mxablate/kernels/torch/fused_ops.h"
#include "mxablate/kernels/torch/produced_operands.h"

namespace mxablate::bench {
namespace {

namespace mk = mxablate::kernels;

struct Row {
  std::string name;
  double bytes;  // what the fused op must read and write, once each
  std::function<void()> fused, unfused;
};

// Rows timed two ways: the first way's time, GB/s and share of the copy ceiling, then the second
// way's time and how much slower it is.
void rate_table(const FusedBenchContext& c, const std::string& first, const std::string& second,
                const std::vector<Row>& rows) {
  c.line("| op | " + first + " ms | GB/s | of copy | " + second + " ms | speed-up |");
  c.line("|---|---:|---:|---:|---:|---:|");
  for (const Row& r : rows) {
    const double first_ms = c.median_ms(r.fused), second_ms = c.median_ms(r.unfused);
    const double gbs = r.bytes / (first_ms * 1e-3) / 1e9;
    c.line("| " + r.name + " | " + fixed(first_ms, 3) + " | " + fixed(gbs, 0) + " | " +
           fixed(100 * gbs / c.copy_gbs, 1) + "% | " + fixed(second_ms, 3) + " | " + fixed(second_ms / first_ms, 2) +
           "x |");
  }
  c.line("");
}

// Autograd's backward through an unfused graph built once (kept for repeated calls).
std::function<void()> autograd_backward(const at::Tensor& y, std::vector<at::Tensor> inputs, const at::Tensor& dy) {
  return [=] { (void)torch::autograd::grad({y}, inputs, {dy}, /*retain_graph=*/true); };
}

// The fused producers (produced_operands.h) at llama-1.3b's MLP width, as the MXFP4+H16 arm asks
// for them: MXFP4 values, round to nearest, the 16-point Hadamard rotation down columns (Wgrad).
void producers_bench(const FusedBenchContext& c) {
  const int64_t tokens = c.quick ? 4096 : 16384, ffn = 5504;
  const auto bf16 = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
  at::manual_seed(3);
  const at::Tensor g = at::randn({tokens, ffn}, bf16), u = at::randn({tokens, ffn}, bf16), dh = at::randn({tokens, ffn}, bf16);
  mk::QuantSpec rows_spec{mk::QuantFormat::kMXFP4};
  mk::QuantSpec cols_spec = rows_spec;
  cols_spec.hadamard = mk::HadamardMode::kDeterministic;
  cols_spec.hadamard_size = 16;
  const mk::AxisQuantization rq{rows_spec, mk::RngKey{1, 1, 1, mk::GemmKind::kFprop, mk::Operand::kA}};
  const mk::AxisQuantization cq{cols_spec, mk::RngKey{1, 1, 1, mk::GemmKind::kWgrad, mk::Operand::kB}};
  const at::Tensor h = mk::swiglu_forward(g, u, at::kBFloat16);
  const mk::SwiGluGrads grads = mk::swiglu_backward(dh, g, u);
  struct ProducerRow {
    std::string name;
    std::function<void()> fused, plain, quantizer;
  };
  const mk::ProducedAxes rows_only{&rq, nullptr}, both{&rq, &cq};
  const std::vector<ProducerRow> table = {
      {"SwiGLU forward, Q(h) along rows", [&] { (void)mk::swiglu_forward_quantized(g, u, at::kBFloat16, rows_only, at::kBFloat16); },
       [&] { (void)mk::swiglu_forward(g, u, at::kBFloat16); },
       [&] { (void)mk::fake_quantize(h, mk::Axis::kRows, rq, nullptr, at::kBFloat16); }},
      {"SwiGLU forward, Q(h) along rows and down columns (H16)",
       [&] { (void)mk::swiglu_forward_quantized(g, u, at::kBFloat16, both, at::kBFloat16); },
       [&] { (void)mk::swiglu_forward(g, u, at::kBFloat16); },
       [&] { (void)mk::fake_quantize_both(h, rq, cq, nullptr, nullptr, at::kBFloat16); }},
      {"SwiGLU backward, Q(dg) and Q(du) along rows and down columns (H16)",
       [&] { (void)mk::swiglu_backward_quantized(dh, g, u, both, both, at::kBFloat16); },
       [&] { (void)mk::swiglu_backward(dh, g, u); },
       [&] {
         (void)mk::fake_quantize_both(grads.dg, rq, cq, nullptr, nullptr, at::kBFloat16);
         (void)mk::fake_quantize_both(grads.du, rq, cq, nullptr, nullptr, at::kBFloat16);
       }},
  };
  c.line("## Fused producers, llama-1.3b MLP (" + std::to_string(tokens) + " x " + std::to_string(ffn) +
         ", MXFP4 values; docs/design.md §4)");
  c.line("");
  c.line("| producer | fused ms | plain op ms | quantizer ms | composed ms | fused ÷ composed |");
  c.line("|---|---:|---:|---:|---:|---:|");
  for (const ProducerRow& r : table) {
    const double fused = c.median_ms(r.fused), plain = c.median_ms(r.plain), quantizer = c.median_ms(r.quantizer);
    c.line("| " + r.name + " | " + fixed(fused, 3) + " | " + fixed(plain, 3) + " | " + fixed(quantizer, 3) + " | " +
           fixed(plain + quantizer, 3) + " | " + fixed(fused / (plain + quantizer), 2) + "x |");
  }
  c.line("");
}

// A copy of t whose data starts one element past a 16-byte boundary: the kernels' scalar path.
at::Tensor misaligned_copy(const at::Tensor& t) {
  at::Tensor view = at::empty({t.numel() + 1}, t.options()).narrow(0, 1, t.numel()).view(t.sizes());
  view.copy_(t);
  return view;
}

// The residual stream's norms at llama-1.3b's width as a step runs them (float32 stream, bf16
// branch and outputs), their vector kernels against the scalar ones (the same bits; a misaligned
// x sends a call to the scalar kernel), and the Wgrad widening against ATen's cast.
void norms_at_scale_bench(const FusedBenchContext& c) {
  const int64_t tokens = c.quick ? 4096 : 16384, d = 2048, ffn = 5504;
  const auto f32 = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);
  const auto bf16 = f32.dtype(at::kBFloat16);
  at::manual_seed(4);
  const at::Tensor x = at::randn({tokens, d}, f32), b = at::randn({tokens, d}, bf16), w = at::ones({d}, f32);
  const at::Tensor dy = at::randn({tokens, d}, bf16), dres = at::randn({tokens, d}, f32);
  const at::Tensor x_off = misaligned_copy(x), dres_off = misaligned_copy(dres);
  const at::Tensor rstd = mk::rms_norm_forward(x, w, 1e-5, at::kBFloat16).rstd;
  const at::Tensor dw = at::randn({d, ffn}, bf16);
  const double n = static_cast<double>(tokens * d);
  const std::vector<Row> table = {
      {"RMSNorm forward (f32 -> bf16)", n * 6, [&] { (void)mk::rms_norm_forward(x, w, 1e-5, at::kBFloat16); },
       [&] { (void)mk::rms_norm_forward(x_off, w, 1e-5, at::kBFloat16); }},
      {"add + RMSNorm forward (f32 + bf16 -> h f32, bf16)", n * 12,
       [&] { (void)mk::add_rms_norm_forward(x, b, w, 1e-5, at::kBFloat16); },
       [&] { (void)mk::add_rms_norm_forward(x_off, b, w, 1e-5, at::kBFloat16); }},
      {"RMSNorm backward + dres (-> dx f32, dbranch bf16)", n * 16,
       [&] { (void)mk::residual_rms_norm_backward(dy, x, w, rstd, dres, at::kBFloat16); },
       [&] { (void)mk::residual_rms_norm_backward(dy, x_off, w, rstd, dres_off, at::kBFloat16); }},
      {"to_float32 of a bf16 Wgrad (" + std::to_string(d) + " x " + std::to_string(ffn) + ")",
       static_cast<double>(d * ffn) * 6, [&] { (void)mk::to_float32(dw); }, [&] { (void)dw.to(at::kFloat); }},
  };
  c.line("## The residual stream's norms at llama-1.3b (" + std::to_string(tokens) + " x " + std::to_string(d) +
         "): vector kernels against the scalar ones (same bits); the last row against ATen's cast");
  c.line("");
  rate_table(c, "vector", "scalar (or ATen)", table);
}

}  // namespace

void fused_ops_bench(const FusedBenchContext& c) {
  producers_bench(c);
  norms_at_scale_bench(c);
  // llama-125m as the trainer runs it: d 768, 12 heads of 64, ffn 3072, the default corpus's
  // 4096-token vocabulary; 16384 tokens a micro-batch (32 sequences of 512), so RMSNorm is
  // 16384 x 768, SwiGLU 16384 x 3072 and RoPE (32, 512, 12, 64).
  const int64_t batch = c.quick ? 8 : 32, seq = 512, d = 768, heads = 12, head_dim = 64, ffn = 3072, vocab = 4096;
  const int64_t tokens = batch * seq;
  const auto f32 = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);
  const auto bf16 = f32.dtype(at::kBFloat16);
  at::manual_seed(2);
  std::vector<Row> rows;

  // RMSNorm: float32 residual in, bf16 out (the next GEMM's operand); unfused: the formula and
  // the conversion MXLinear did afterwards.
  const at::Tensor x = at::randn({tokens, d}, f32), w = at::ones({d}, f32), dy_norm = at::randn({tokens, d}, bf16);
  const mk::RmsNormOutput norm = mk::rms_norm_forward(x, w, 1e-5, at::kBFloat16);
  const at::Tensor xg = x.clone().requires_grad_(true), wg = w.clone().requires_grad_(true);
  const at::Tensor norm_graph = xg * at::rsqrt(xg.pow(2).mean(-1, true) + 1e-5) * wg;
  rows.push_back({"RMSNorm forward (f32 -> bf16)", tokens * d * 6.0 + tokens * 4.0,
                  [&] { (void)mk::rms_norm_forward(x, w, 1e-5, at::kBFloat16); },
                  [&] { (void)(x * at::rsqrt(x.pow(2).mean(-1, true) + 1e-5) * w).to(at::kBFloat16); }});
  rows.push_back({"RMSNorm backward (bf16 dy -> f32 dx, dw)", tokens * d * 10.0 + tokens * 4.0,
                  [&] { (void)mk::rms_norm_backward(dy_norm, x, w, norm.rstd); },
                  autograd_backward(norm_graph, {xg, wg}, dy_norm.to(at::kFloat))});

  // SwiGLU on bf16 gate/up outputs.
  const at::Tensor g = at::randn({tokens, ffn}, bf16), u = at::randn({tokens, ffn}, bf16), dh = at::randn({tokens, ffn}, bf16);
  const at::Tensor gg = g.clone().requires_grad_(true), ug = u.clone().requires_grad_(true);
  const at::Tensor swiglu_graph = at::silu(gg) * ug;
  rows.push_back({"SwiGLU forward (bf16)", tokens * ffn * 6.0, [&] { (void)mk::swiglu_forward(g, u, at::kBFloat16); },
                  [&] { (void)(at::silu(g) * u); }});
  rows.push_back({"SwiGLU backward (bf16)", tokens * ffn * 10.0, [&] { (void)mk::swiglu_backward(dh, g, u); },
                  autograd_backward(swiglu_graph, {gg, ug}, dh)});

  // RoPE of a (B, T, H, D) bf16 projection viewed as (B, H, T, D).
  const at::Tensor angles = at::outer(at::arange(0, seq, f32), at::rand({head_dim / 2}, f32));
  const at::Tensor cos = angles.cos(), sin = angles.sin();
  const at::Tensor q = at::randn({batch, seq, heads, head_dim}, bf16).transpose(1, 2);
  const at::Tensor dq = at::randn({batch, heads, seq, head_dim}, bf16);
  const auto unfused_rope = [&](const at::Tensor& t) {
    const at::Tensor t1 = t.narrow(-1, 0, head_dim / 2), t2 = t.narrow(-1, head_dim / 2, head_dim / 2);
    return at::cat({t1 * cos - t2 * sin, t1 * sin + t2 * cos}, -1);
  };
  const at::Tensor qg = q.detach().clone().requires_grad_(true);
  const at::Tensor rope_graph = unfused_rope(qg);
  const at::Tensor dq_into = at::empty_strided(q.sizes(), q.strides(), bf16);
  const double rope_bytes = tokens * heads * head_dim * 4.0 + seq * head_dim * 4.0;
  rows.push_back({"RoPE forward (bf16)", rope_bytes,
                  [&] { (void)mk::rope(q, cos, sin, mk::RopeDirection::kForward, at::kBFloat16); },
                  [&] { (void)unfused_rope(q); }});
  rows.push_back({"RoPE backward (bf16)", rope_bytes,
                  [&] { mk::rope_into(dq, cos, sin, mk::RopeDirection::kInverse, dq_into); },
                  autograd_backward(rope_graph, {qg}, dq)});

  // Cross-entropy over the LM head's logits, bf16 and float32.
  const at::Tensor targets = at::randint(vocab, {tokens}, f32.dtype(at::kLong));
  for (at::ScalarType dtype : {at::kBFloat16, at::kFloat}) {
    const std::string name = dtype == at::kFloat ? "f32" : "bf16";
    const double elem = dtype == at::kFloat ? 4.0 : 2.0;
    const at::Tensor logits = at::randn({tokens, vocab}, f32.dtype(dtype));
    const mk::CrossEntropyOutput ce = mk::cross_entropy_forward(logits, targets);
    const at::Tensor lg = logits.clone().requires_grad_(true);
    const at::Tensor ce_graph = at::cross_entropy_loss(lg, targets);
    const at::Tensor one = at::ones({}, f32);
    rows.push_back({"cross-entropy forward (" + name + " logits)", tokens * (vocab * elem + 16.0),
                    [=] { (void)mk::cross_entropy_forward(logits, targets).loss.mean(); },
                    [=] { (void)at::cross_entropy_loss(logits, targets); }});
    rows.push_back({"cross-entropy backward (" + name + " logits)", tokens * (vocab * 2 * elem + 12.0),
                    [=] { (void)mk::cross_entropy_backward(one, logits, targets, ce.lse); },
                    autograd_backward(ce_graph, {lg}, one.to(dtype))});
  }

  c.line("## Fused common-path ops, llama-125m shapes (" + std::to_string(tokens) +
         " tokens; bytes = inputs read once + outputs written once)");
  c.line("");
  c.line("\"of copy\" is the fraction of the copy ceiling above (" + fixed(c.copy_gbs, 0) +
         " GB/s); the elementwise kernels' goal is 80 % (kernels/README.md).");
  c.line("");
  rate_table(c, "fused", "unfused LibTorch", rows);
}

}  // namespace mxablate::bench
