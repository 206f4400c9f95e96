// Selective recompute's seam (mx_linear.h, RebuiltInput; docs/design.md §4, "Recompute chosen by
// the memory plan"): a layer given its input as the backward can make it again keeps nothing of X
// for Wgrad, makes Wgrad's operand in the backward, and gives the same output, gradients and
// telemetry as a layer that kept it, bit for bit; readers of one input make it once; a source
// changed in place since the forward is an error, not a different X.
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <algorithm>
#include <memory>
#include <tuple>
#include <vector>

#include "catch.h"
#include "test_support.h"
#include "mxablate/trainer/numerics/mx_linear.h"

using namespace mxablate;
using namespace mxablate::trainer;
using kernels::GemmKind;
using kernels::Operand;
using kernels::QuantFormat;
using kernels::QuantSpec;

namespace {

constexpr int64_t kM = 64, kK = 96, kN = 32;
constexpr int kReaders = 3;  // like q, k and v

LinearPlan mxfp4_plan(bool stochastic_wgrad_x) {
  LinearPlan plan = plain_bf16_plan();
  for (auto& g : plan.gemm) g.operand = {QuantSpec{QuantFormat::kMXFP4}, QuantSpec{QuantFormat::kMXFP4}};
  if (stochastic_wgrad_x)
    plan.gemm[static_cast<size_t>(GemmKind::kWgrad)].operand[1].rounding = kernels::Rounding::kStochastic;
  return plan;
}

struct Pass {
  std::vector<at::Tensor> y, dw;
  at::Tensor dsource;
  std::vector<QuantSession::Record> forward_records, records;
  int makes = 0;
};

// kReaders layers read x = tanh(source) · 1.5 (a stand-in for a norm's output); with `rebuild`
// they get it as a RebuiltInput made from source.
Pass run(const LinearPlan& plan, bool rebuild) {
  auto session = std::make_shared<QuantSession>();
  session->seed = 3;
  session->step = 8;
  session->collect_telemetry = true;
  at::Generator gen = at::detail::createCPUGenerator(5);
  const at::Tensor source = at::randn({kM, kK}, gen).requires_grad_(true);
  std::vector<at::Tensor> weights;
  for (int i = 0; i < kReaders; ++i) weights.push_back(at::randn({kN, kK}, gen).requires_grad_(true));
  Pass p;
  const auto make = [&p](const std::vector<at::Tensor>& s) {
    ++p.makes;
    return at::tanh(s[0]) * 1.5;
  };
  const at::Tensor x = make({source});
  p.makes = 0;
  const auto rebuilt = rebuild ? std::make_shared<RebuiltInput>(std::vector<at::Tensor>{source}, make) : nullptr;
  at::Tensor total;
  for (int i = 0; i < kReaders; ++i) {
    const auto state = std::make_shared<LinearState>(i, plan, session);
    const at::Tensor y = mx_linear(x, weights[static_cast<size_t>(i)], state, rebuilt);
    p.y.push_back(y.detach());
    total = total.defined() ? total + y.sum() : y.sum();
  }
  p.forward_records = session->take_records();
  CHECK(p.makes == 0);  // nothing is made again before the backward
  total.backward();
  for (const at::Tensor& w : weights) p.dw.push_back(w.grad());
  p.dsource = source.grad();
  p.records = session->take_records();
  return p;
}

bool same(const kernels::QuantTelemetry& a, const kernels::QuantTelemetry& b) {
  return std::tie(a.elements, a.nonzero_inputs, a.saturated, a.flushed, a.sum_sq_error, a.sum_sq_input) ==
         std::tie(b.elements, b.nonzero_inputs, b.saturated, b.flushed, b.sum_sq_error, b.sum_sq_input);
}

// The records of both passes in (layer, GEMM, operand) order, as take_records gives each pass's.
std::vector<QuantSession::Record> all_records(const Pass& p) {
  std::vector<QuantSession::Record> all = p.forward_records;
  all.insert(all.end(), p.records.begin(), p.records.end());
  std::stable_sort(all.begin(), all.end(), [](const auto& l, const auto& r) {
    return std::tie(l.layer, l.gemm, l.operand) < std::tie(r.layer, r.gemm, r.operand);
  });
  return all;
}

int count_wgrad_x(const std::vector<QuantSession::Record>& records) {
  int n = 0;
  for (const auto& r : records) n += r.gemm == GemmKind::kWgrad && r.operand == Operand::kB;
  return n;
}

}  // namespace

TEST_CASE("A layer whose input is made again gives the kept input's outputs, gradients and telemetry bit for bit") {
  for (const bool stochastic : {false, true}) {
    INFO((stochastic ? "stochastic" : "nearest") << " rounding of Wgrad's X");
    const LinearPlan plan = mxfp4_plan(stochastic);
    const Pass kept = run(plan, false);
    const Pass made = run(plan, true);
    for (int i = 0; i < kReaders; ++i) {
      CHECK(at::equal(kept.y[static_cast<size_t>(i)], made.y[static_cast<size_t>(i)]));
      CHECK(at::equal(kept.dw[static_cast<size_t>(i)], made.dw[static_cast<size_t>(i)]));
    }
    CHECK(at::equal(kept.dsource, made.dsource));
    // Wgrad's X is quantized in the forward when kept, in the backward when made again: what the
    // forward keeps for the backward no longer holds it.
    CHECK(count_wgrad_x(kept.forward_records) == kReaders);
    CHECK(count_wgrad_x(made.forward_records) == 0);
    CHECK(count_wgrad_x(made.records) == kReaders);
    // Taken over both passes, the same records.
    const std::vector<QuantSession::Record> a = all_records(kept), b = all_records(made);
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      INFO("record " << i);
      CHECK(std::tie(a[i].layer, a[i].gemm, a[i].operand) == std::tie(b[i].layer, b[i].gemm, b[i].operand));
      CHECK(same(a[i].telemetry, b[i].telemetry));
    }
    // The readers' backwards make the input once between them.
    CHECK(made.makes == 1);
  }
  SECTION("plain BF16 Wgrad alike") {
    const Pass kept = run(plain_bf16_plan(), false);
    const Pass made = run(plain_bf16_plan(), true);
    for (int i = 0; i < kReaders; ++i) CHECK(at::equal(kept.dw[static_cast<size_t>(i)], made.dw[static_cast<size_t>(i)]));
    CHECK(made.makes == 1);
  }
}

TEST_CASE("A rebuilt input is let go after its last reader and refuses a source changed in place") {
  at::Generator gen = at::detail::createCPUGenerator(6);
  at::Tensor source = at::randn({4, 8}, gen);
  int makes = 0;
  auto rebuilt = std::make_shared<RebuiltInput>(std::vector<at::Tensor>{source}, [&](const std::vector<at::Tensor>& s) {
    ++makes;
    CHECK_FALSE(at::GradMode::is_enabled());  // made without a graph
    return s[0] * 2;
  });
  const c10::weak_intrusive_ptr<c10::TensorImpl> weak(source.getIntrusivePtr());
  rebuilt->add_reader();
  rebuilt->add_reader();
  {
    const torch::AutoGradMode grad(true);
    CHECK(at::equal(rebuilt->take(), source * 2));
  }
  CHECK(at::equal(rebuilt->take(), source * 2));
  CHECK(makes == 1);
  CHECK_THROWS(rebuilt->take());  // more takes than readers is a bug, not a silent remake
  source = at::Tensor();
  CHECK(weak.expired());  // the last reader let its source go

  at::Tensor changed = at::randn({4, 8}, gen);
  auto stale = std::make_shared<RebuiltInput>(std::vector<at::Tensor>{changed},
                                              [](const std::vector<at::Tensor>& s) { return s[0] + 1; });
  stale->add_reader();
  changed.add_(1.0);
  CHECK_THROWS_WITH(stale->take(), has_text("changed in place after the forward"));
}
