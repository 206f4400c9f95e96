#include "mxablate/trainer/model/block_checkpoint.h"

#include <torch/autograd.h>

#include <utility>

#include "mxablate/trainer/numerics/telemetry_setting.h"

namespace mxablate::trainer {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Carries the block through autograd's saved data (which holds only IValues).
struct BlockCapsule : torch::CustomClassHolder {
  BlockCapsule(BlockFunction b, std::shared_ptr<QuantSession> s)
      : block(std::move(b)), session(std::move(s)) {}
  BlockFunction block;
  std::shared_ptr<QuantSession> session;
};

class CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
 public:
  // apply() runs this with grad mode off: the block builds no graph and keeps no activations.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, at::TensorList parameters,
                            const c10::intrusive_ptr<BlockCapsule>& capsule) {
    const bool collect = capsule->session->collect_telemetry;
    at::Tensor y;
    {
      const TelemetrySetting off(*capsule->session, false);  // the recompute records them
      y = capsule->block(x);
    }
    ctx->saved_data["block"] = c10::IValue::make_capsule(capsule);
    ctx->saved_data["collect_telemetry"] = collect;
    // The parameters are saved, not copied: autograd's version check then refuses a backward
    // after they changed in place (the recompute would no longer give the forward's values).
    variable_list saved{x};
    saved.insert(saved.end(), parameters.begin(), parameters.end());
    ctx->save_for_backward(saved);
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto capsule =
        c10::static_intrusive_pointer_cast<BlockCapsule>(ctx->saved_data["block"].toCapsule());
    const variable_list saved = ctx->get_saved_variables();
    // One gradient per input of forward: x, each parameter, the capsule (none).
    variable_list out(saved.size() + 1);
    if (!grads[0].defined()) return out;

    const torch::AutoGradMode grad_on(true);
    const bool collect = ctx->saved_data["collect_telemetry"].toBool();
    const TelemetrySetting telemetry(*capsule->session, collect);
    // The saved input stands for the previous block's output, detached so that this graph ends
    // here; the outer backward carries its gradient on from the returned dx.
    const at::Tensor input = saved[0].detach().requires_grad_(true);
    const at::Tensor y = capsule->block(input);
    variable_list inputs{input};
    std::vector<size_t> slot{0};
    for (size_t i = 1; i < saved.size(); ++i) {
      if (!saved[i].requires_grad()) continue;
      inputs.push_back(saved[i]);
      slot.push_back(i);
    }
    const variable_list g = torch::autograd::grad({y}, inputs, {grads[0]}, /*retain_graph=*/false,
                                                  /*create_graph=*/false, /*allow_unused=*/true);
    for (size_t k = 0; k < g.size(); ++k) out[slot[k]] = g[k];
    return out;
  }
};

}  // namespace

at::Tensor checkpointed(BlockFunction block, const at::Tensor& x,
                        const std::vector<at::Tensor>& parameters,
                        std::shared_ptr<QuantSession> session) {
  bool any_grad = x.requires_grad();
  for (const at::Tensor& p : parameters) any_grad = any_grad || p.requires_grad();
  // Evaluation (no grad) keeps no activations anyway, and then nothing would recompute.
  if (!at::GradMode::is_enabled() || !any_grad) return block(x);
  auto capsule = c10::make_intrusive<BlockCapsule>(std::move(block), std::move(session));
  return CheckpointFunction::apply(x, at::TensorList(parameters), capsule);
}

}  // namespace mxablate::trainer
