// Divergence detection: what is flagged, when, with which severity, and that the state survives
// a checkpoint round trip through JSON exactly.
#include <cmath>
#include <limits>

#include "catch.h"
#include "mxablate/trainer/rules/divergence.h"

using namespace mxablate;
using namespace mxablate::trainer;

namespace {
contract::DivergenceConfig config(int fatal_after = 0) {
  contract::DivergenceConfig c;
  c.loss_spike_factor = 1.5;
  c.grad_norm_factor = 10;
  c.val_regression = 0.05;
  c.fatal_after_spikes = fatal_after;
  return c;
}
}  // namespace

TEST_CASE("Non-finite loss or gradient norm is fatal", "[trainer][divergence]") {
  DivergenceDetector d(config());
  auto f = d.observe_step(std::nan(""), 1.0);
  REQUIRE(f.size() == 1);
  CHECK(f[0].reason == divergence_reason::kNonfiniteLoss);
  CHECK(f[0].fatal);
  f = d.observe_step(3.0, std::numeric_limits<double>::infinity());
  REQUIRE(f.size() == 1);
  CHECK(f[0].reason == divergence_reason::kNonfiniteGrad);
  CHECK(f[0].fatal);
}

TEST_CASE("Loss spikes are judged against the running mean after a warmup", "[trainer][divergence]") {
  DivergenceDetector d(config(/*fatal_after=*/2));
  // During the warmup even a large jump is not judged.
  for (int i = 0; i < 5; ++i) CHECK(d.observe_step(4.0, 1.0).empty());
  CHECK(d.observe_step(9.0, 1.0).empty());
  for (int i = 0; i < 30; ++i) CHECK(d.observe_step(4.0, 1.0).empty());
  CHECK(d.observe_step(5.9, 1.0).empty());  // below 1.5 x ~4.06
  auto f = d.observe_step(6.5, 1.0);
  REQUIRE(f.size() == 1);
  CHECK(f[0].reason == divergence_reason::kLossSpike);
  CHECK(f[0].value == 6.5);
  CHECK(f[0].reference == Approx(4.2).margin(0.15));
  CHECK_FALSE(f[0].fatal);
  // The spike entered the mean clamped (at 1.5 x 4.21, so the mean is now ~4.42): a loss of 7
  // right after is the second spike, which the config makes fatal.
  f = d.observe_step(7.0, 1.0);
  REQUIRE(f.size() == 1);
  CHECK(f[0].fatal);
  CHECK(d.loss_spikes() == 2);
}

TEST_CASE("Gradient-norm explosions are warnings", "[trainer][divergence]") {
  DivergenceDetector d(config());
  for (int i = 0; i < 20; ++i) CHECK(d.observe_step(3.0, 0.5).empty());
  auto f = d.observe_step(3.0, 6.0);
  REQUIRE(f.size() == 1);
  CHECK(f[0].reason == divergence_reason::kGradNormExplosion);
  CHECK(f[0].reference == Approx(0.5));
  CHECK_FALSE(f[0].fatal);
  CHECK(d.observe_step(3.0, 4.0).empty());
}

TEST_CASE("Validation regressions compare with the best loss so far", "[trainer][divergence]") {
  DivergenceDetector d(config());
  CHECK(d.observe_eval(5.0).empty());
  CHECK(d.observe_eval(4.0).empty());
  CHECK(d.observe_eval(4.04).empty());
  auto f = d.observe_eval(4.2);
  REQUIRE(f.size() == 1);
  CHECK(f[0].reason == divergence_reason::kValRegression);
  CHECK(f[0].reference == 4.0);
  CHECK_FALSE(f[0].fatal);
  CHECK(d.best_val_loss() == 4.0);
  CHECK(d.observe_eval(std::nan(""))[0].fatal);
}

TEST_CASE("Detector state round-trips exactly through JSON", "[trainer][divergence]") {
  DivergenceDetector a(config(3)), b(config(3));
  for (int i = 0; i < 15; ++i) a.observe_step(4.0 + 0.1 * std::sin(i), 1.0 + 0.01 * i);
  a.observe_step(7.0, 1.0);
  a.observe_eval(3.9);
  b.restore(nlohmann::json::parse(a.state().dump()));
  CHECK(b.state() == a.state());
  for (double loss : {4.0, 6.3, 6.4, 4.1}) {
    const auto fa = a.observe_step(loss, 1.0);
    const auto fb = b.observe_step(loss, 1.0);
    REQUIRE(fa.size() == fb.size());
    for (size_t i = 0; i < fa.size(); ++i) {
      CHECK(fa[i].reference == fb[i].reference);
      CHECK(fa[i].fatal == fb[i].fatal);
    }
  }
  DivergenceDetector fresh(config());
  CHECK(fresh.state()["best_val_loss"].is_null());
}

namespace {
// A gradient-norm trace shaped like the 20M GPU sweep's: large norms at initialization that fall
// quickly, a bump while the learning rate ramps up (steps 15-30), then a slow settle.
double warmup_trace(int step) {
  if (step < 10) return 8.0 * std::exp(-0.35 * step) + 0.2;
  if (step < 15) return 0.25;
  if (step < 30) return 0.25 + 6.0 * std::sin((step - 15) * 3.14159 / 15.0);
  return 0.6 + 0.05 * std::sin(step);
}
}  // namespace

TEST_CASE("Gradient norms during the learning-rate warm-up are not explosions", "[trainer][divergence]") {
  DivergenceDetector d(config(), /*warmup_steps=*/40);
  for (int step = 0; step < 200; ++step) {
    INFO("step " << step << " norm " << warmup_trace(step));
    CHECK(d.observe_step(3.0, warmup_trace(step)).empty());
  }
  // A real explosion after the warm-up is a warning against the median of recent norms.
  const auto f = d.observe_step(3.0, 20.0);
  REQUIRE(f.size() == 1);
  CHECK(f[0].reason == divergence_reason::kGradNormExplosion);
  CHECK(f[0].reference == Approx(0.6).margin(0.06));
  CHECK_FALSE(f[0].fatal);
  // It entered the history clamped, and one outlier does not move a median: the next ordinary
  // step is not judged against a raised bar, and a second explosion is still one.
  CHECK(d.observe_step(3.0, 0.6).empty());
  CHECK(d.observe_step(3.0, 15.0).size() == 1);
}

TEST_CASE("Without a warm-up, gradient norms are judged once there is enough history", "[trainer][divergence]") {
  // With no warm-up configured, a norm is judged once kMinGradHistory norms are known.
  DivergenceDetector d(config());
  for (int i = 0; i < DivergenceDetector::kMinGradHistory - 1; ++i) CHECK(d.observe_step(3.0, 0.1).empty());
  CHECK(d.observe_step(3.0, 50.0).empty());  // history too short to judge
  CHECK(d.observe_step(3.0, 50.0).size() == 1);
}

TEST_CASE("A malformed detector state is refused by name and changes nothing", "[trainer][divergence]") {
  DivergenceDetector a(config(3));
  for (int i = 0; i < 30; ++i) a.observe_step(4.0, 1.0 + 0.01 * i);
  const nlohmann::json good = a.state();
  const auto refused = [&](nlohmann::json s) {
    DivergenceDetector b(config(3));
    b.restore(good);
    try {
      b.restore(s);
    } catch (const std::invalid_argument& e) {
      CHECK(b.state() == good);
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  nlohmann::json s = good;
  s["grad_norms"][3] = -1.0;
  CHECK(refused(s) == "divergence.grad_norms: expected finite numbers >= 0");
  s = good;
  s["loss_mean"]["weight"] = 7.0;
  CHECK(refused(s) == "divergence.loss_mean.weight: expected a number in [0, 1]");
  s = good;
  s.erase("steps");
  CHECK(refused(s) == "divergence.steps: missing");
  s = good;
  s["loss_spikes"] = -2;
  CHECK(refused(s) == "divergence.loss_spikes: expected an integer >= 0, got -2");
  s["loss_spikes"] = 1e19;
  CHECK(refused(s) == "divergence.loss_spikes: out of range (beyond 9e15 write an integer digit by "
                      "digit, without an exponent), got 1e+19");
  s = good;
  s["best_val_loss"] = "low";
  CHECK(refused(s) == "divergence.best_val_loss: expected a finite number or null");
  s = good;
  s["grad_norms"] = nlohmann::json::array();
  for (int i = 0; i < 65; ++i) s["grad_norms"].push_back(1.0);
  CHECK(refused(s) == "divergence.grad_norms: expected a list of at most 64 numbers");
  CHECK(refused(nlohmann::json::array()) == "divergence: expected an object");
}
