// The loss without the logits (docs/design.md §4): the LM head and the cross-entropy over chunks.
//
// Why the backward recomputes each chunk's logits rather than the forward computing the
// gradients (fused-linear-cross-entropy style): both have the same peak — at the LM head's
// backward every block's activations are alive, and both then hold dW's float32 sum over the
// chunks plus one chunk's dW (vocab × d_model each: 2 GiB at the 8B shape) and one chunk's
// logits and their gradient — but computing them in the forward holds dW and d hidden from the
// forward until the backward, and multiplies them by the upstream gradient afterwards (one more
// pass over dW, and a rounding the whole expression does not have: it scales the logits'
// gradient before the GEMMs). Recomputing scales as the whole expression does, keeps the LM head
// the MXLinear autograd function it is (its own plan, DGE, OCC, telemetry, random streams keyed
// by step and layer, so the recompute gives the forward's logits), and costs one more LM-head
// Fprop GEMM per chunk: 2 · d_model · vocab FLOPs a token, about 2 % of an 8B step.
#include "mxablate/trainer/model/chunked_loss.h"

#include <torch/autograd.h>
#include <torch/custom_class.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <utility>

#include "mxablate/trainer/numerics/fused_model_ops.h"
#include "mxablate/trainer/numerics/telemetry_setting.h"
#include "mxablate/trainer/numerics/weight_gradient.h"

namespace mxablate::trainer {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Carries the LM head's state (as the forward ran it) through autograd's saved data.
struct HeadCapsule : torch::CustomClassHolder {
  HeadCapsule(std::shared_ptr<const LinearState> s, int64_t chunk, bool f)
      : state(std::move(s)), chunk_tokens(chunk), fused(f) {}
  std::shared_ptr<const LinearState> state;
  int64_t chunk_tokens;
  bool fused;
};

// The mean loss over the chunks, keeping no chunk's logits; `sample_telemetry`: the first
// chunk's quantizations are recorded (telemetry is a sample of a step; one chunk stands for the
// micro-batch as one micro-batch stands for the step), the others' not.
at::Tensor chunk_losses(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                        const HeadCapsule& head, bool sample_telemetry) {
  QuantSession& session = *head.state->session;
  const bool collect = session.collect_telemetry;
  const int64_t rows = hidden.size(0);
  at::Tensor sum;
  for (int64_t first = 0; first < rows; first += head.chunk_tokens) {
    const int64_t n = std::min(head.chunk_tokens, rows - first);
    const TelemetrySetting sample(session, sample_telemetry && collect && first == 0);
    const at::Tensor logits = mx_linear(hidden.narrow(0, first, n), weight, head.state);
    const at::Tensor part =
        mean_cross_entropy(logits, targets.narrow(0, first, n), head.fused) * static_cast<double>(n);
    sum = sum.defined() ? sum + part : part;
  }
  return sum / static_cast<double>(rows);
}

class ChunkedLossFunction : public torch::autograd::Function<ChunkedLossFunction> {
 public:
  // apply() runs this with grad mode off: no chunk's logits outlive its loss.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& weight,
                            const at::Tensor& targets, const c10::intrusive_ptr<HeadCapsule>& head) {
    // As a checkpointed block (block_checkpoint.h): this no-grad pass skips the column-wise
    // quantizations only backward needs, so the recompute records the telemetry, complete.
    ctx->saved_data["collect_telemetry"] = head->state->session->collect_telemetry;
    const at::Tensor loss = chunk_losses(hidden, weight, targets, *head, /*sample_telemetry=*/false);
    ctx->saved_data["head"] = c10::IValue::make_capsule(head);
    // Saved, not copied: autograd's version check refuses a backward after the weight changed
    // in place (the recompute would no longer give the forward's logits).
    ctx->save_for_backward({hidden, weight, targets});
    return loss;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out(4);  // hidden, weight, targets, the capsule
    if (!grads[0].defined()) return out;
    const auto head = c10::static_intrusive_pointer_cast<HeadCapsule>(ctx->saved_data["head"].toCapsule());
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& hidden = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor& targets = saved[2];
    const bool want_dx = hidden.requires_grad(), want_dw = weight.requires_grad();
    const bool collect = ctx->saved_data["collect_telemetry"].toBool();
    const int64_t rows = hidden.size(0);
    // A BF16 working copy (weight_gradient.h): each chunk's MXLinear gives its float32 dW to the
    // weight's sink; summed here first, in the same order, the sink gets the sum once.
    const std::shared_ptr<const WeightGradientSink> sink =
        want_dw && weight.scalar_type() != at::kFloat ? weight_gradient_sink(weight) : nullptr;
    std::optional<WeightGradientSum> sunk;
    if (sink) sunk.emplace(sink);

    const torch::AutoGradMode grad_on(true);
    at::Tensor dx = want_dx ? at::empty_like(hidden) : at::Tensor();
    at::Tensor dw;
    for (int64_t first = 0; first < rows; first += head->chunk_tokens) {
      const int64_t n = std::min(head->chunk_tokens, rows - first);
      const TelemetrySetting sample(*head->state->session, collect && first == 0);
      // The saved hidden rows stand for the final norm's output, detached so that this graph
      // ends here; the outer backward carries their gradient on from dx.
      const at::Tensor x = hidden.narrow(0, first, n).detach().requires_grad_(want_dx);
      const at::Tensor loss =
          mean_cross_entropy(mx_linear(x, weight, head->state), targets.narrow(0, first, n), head->fused);
      // The chunk's n rows are n of the mean's `rows`: its share of the upstream gradient.
      const at::Tensor g = grads[0] * (static_cast<double>(n) / static_cast<double>(rows));
      variable_list inputs;
      if (want_dx) inputs.push_back(x);
      if (want_dw && !sink) inputs.push_back(weight);
      if (inputs.empty()) {  // only a sunk dW is wanted: its MXLinear gives it to the sum
        torch::autograd::backward({loss}, {g});
        continue;
      }
      const variable_list d = torch::autograd::grad({loss}, inputs, {g}, /*retain_graph=*/false,
                                                    /*create_graph=*/false, /*allow_unused=*/true);
      if (want_dx) dx.narrow(0, first, n).copy_(d[0]);
      if (want_dw && !sink) {
        // The first chunk's dW is a fresh tensor of ours: the sum accumulates into it.
        const at::Tensor& chunk_dw = d[want_dx ? 1 : 0];
        dw = dw.defined() ? dw.add_(chunk_dw) : chunk_dw;
      }
    }
    if (sink && sunk->sum().defined()) {
      const at::Tensor sum = sunk->sum();
      sunk.reset();
      give_weight_gradient(sink, sum);
    }
    out[0] = dx;
    out[1] = dw;
    return out;
  }
};

}  // namespace

at::Tensor mean_cross_entropy(const at::Tensor& logits, const at::Tensor& targets, bool fused) {
  // The fused cross-entropy reads the GEMM's BF16 logits and does its math in float32: the same
  // values as converting them first (BF16 -> float32 is exact), without a float32 copy of
  // tokens x vocabulary; its gradient comes back in BF16, as the LM head's Dgrad/Wgrad round it.
  if (fused) return fused_cross_entropy(logits, targets);
  return at::cross_entropy_loss(logits.to(at::kFloat), targets);
}

at::Tensor chunked_lm_head_loss(const at::Tensor& hidden, MXLinear lm_head, const at::Tensor& targets,
                                int64_t chunk_tokens, bool fused) {
  TORCH_CHECK(hidden.dim() == 2 && targets.dim() == 1 && targets.size(0) == hidden.size(0),
              "chunked_lm_head_loss: hidden must be (rows, d_model) and targets (rows), got ", hidden.sizes(),
              " and ", targets.sizes());
  TORCH_CHECK(chunk_tokens > 0, "chunked_lm_head_loss: chunk_tokens must be > 0, got ", chunk_tokens);
  // Logits that fit: the whole expression, as it always was (those runs keep their bits).
  if (chunk_tokens >= hidden.size(0)) return mean_cross_entropy(lm_head->forward(hidden), targets, fused);
  auto head = c10::make_intrusive<HeadCapsule>(lm_head->state(), chunk_tokens, fused);
  // Evaluation (no grad) needs no backward, hence no autograd node.
  if (!at::GradMode::is_enabled() || !(hidden.requires_grad() || lm_head->weight.requires_grad()))
    return chunk_losses(hidden, lm_head->weight, targets, *head, /*sample_telemetry=*/true);
  return ChunkedLossFunction::apply(hidden, lm_head->weight, targets, head);
}

}  // namespace mxablate::trainer
