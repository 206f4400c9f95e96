// The config key table (config_keys.h): every key a config may hold has its traits pinned here,
// so a key added to the contract without a row (or with a row nobody looked at) fails; and the
// identity JSON, the trajectory and an arm's description follow the table.
#include <map>
#include <string>
#include <vector>

#include "catch.h"
#include "mxablate/contract/config_keys.h"
#include "mxablate/contract/run_config.h"
#include "mxablate/contract/settings_difference.h"

using namespace mxablate::contract;
using nlohmann::json;

namespace {

// The key paths of a JSON tree's values: mappings are walked, anything else (lists too) is one.
void leaf_paths(const json& tree, const std::string& path, std::vector<std::string>& out) {
  if (!tree.is_object()) {
    out.push_back(path);
    return;
  }
  for (const auto& item : tree.items())
    leaf_paths(item.value(), path.empty() ? item.key() : path + "." + item.key(), out);
}

std::vector<std::string> leaf_paths(const json& tree) {
  std::vector<std::string> out;
  leaf_paths(tree, "", out);
  return out;
}

// A row's traits as words: "set trajectory arm execution" (set: written only when not default).
std::string traits_of(const ConfigKey& k) {
  std::string out;
  const auto add = [&out](const char* word) { out += (out.empty() ? "" : " ") + std::string(word); };
  if (k.has(kWrittenWhenSet)) add("set");
  if (k.has(kTrajectory)) add("trajectory");
  if (k.has(kDescribesArm)) add("arm");
  if (k.has(kExecution)) add("execution");
  return out.empty() ? "-" : out;
}

// Every key of config_key_tree() with the traits its row gives it. A new key fails the test
// below until it has a row in config_keys.h and its line here.
const std::map<std::string, std::string> kPinned = {
    {"run_id", "-"},
    {"sweep", "-"},
    {"arm", "-"},
    {"model.d_model", "trajectory arm"},
    {"model.n_layers", "trajectory arm"},
    {"model.n_heads", "trajectory arm"},
    {"model.n_kv_heads", "trajectory arm"},
    {"model.ffn_hidden", "trajectory arm"},
    {"model.rope_theta", "set trajectory arm"},
    {"model.norm_eps", "set trajectory arm"},
    {"data.dataset", "trajectory arm"},
    {"data.seq_len", "trajectory arm"},
    {"train.global_batch_tokens", "trajectory arm"},
    {"train.micro_batch_tokens", "trajectory arm"},
    {"train.max_tokens", "trajectory arm"},
    {"train.lr", "trajectory arm"},
    {"train.min_lr_ratio", "trajectory arm"},
    {"train.warmup_tokens", "trajectory arm"},
    {"train.weight_decay", "trajectory arm"},
    {"train.beta1", "trajectory arm"},
    {"train.beta2", "trajectory arm"},
    {"train.eps", "trajectory arm"},
    {"train.grad_clip", "trajectory arm"},
    {"train.seed", "trajectory"},
    {"train.data_seed", "trajectory"},
    {"train.activation_checkpointing", "set execution"},
    {"train.cuda_graphs", "set execution"},
    {"train.fused_producers", "set execution"},
    {"train.deterministic", "set trajectory arm"},
    {"eval.every_tokens", "arm"},
    {"eval.tokens", "arm"},
    {"precision.fprop", "trajectory arm"},
    {"precision.dgrad", "trajectory arm"},
    {"precision.wgrad", "trajectory arm"},
    {"quant.scale_rule", "trajectory arm"},
    {"quant.stochastic_rounding", "trajectory arm"},
    {"quant.hadamard.mode", "trajectory arm"},
    {"quant.hadamard.size", "trajectory arm"},
    {"quant.hadamard.gemms", "trajectory arm"},
    {"quant.weight_blocks", "set trajectory arm"},
    {"quant.sr_prescale", "set trajectory arm"},
    {"quant.dge.k", "set trajectory arm"},
    {"quant.dge.clamp", "set trajectory arm"},
    {"quant.occ.quantile", "set trajectory arm"},
    {"quant.gemm_path", "trajectory arm"},
    {"quant.fp8_scaling", "set trajectory arm"},
    {"quant.fp8_amax_history", "set trajectory arm"},
    {"quant.fp8_margin", "set trajectory arm"},
    {"quant.bf16_first_blocks", "trajectory arm"},
    {"quant.bf16_last_blocks", "trajectory arm"},
    {"precision_schedule", "set arm"},
    {"overrides", "set arm"},
    {"target.val_loss", "-"},
    {"target.stop_at_target", "-"},
    {"target.stop_hopeless", "set"},
    {"target.hopeless_confidence", "set"},
    {"divergence.loss_spike_factor", "arm"},
    {"divergence.grad_norm_factor", "arm"},
    {"divergence.val_regression", "arm"},
    {"divergence.fatal_after_spikes", "arm"},
    {"checkpoint.every_steps", "arm"},
    {"checkpoint.keep", "arm"},
    {"telemetry.train_every_steps", "arm"},
    {"telemetry.quant_every_steps", "arm"},
    {"device", "execution"},
    {"threads", "execution"},
    {"mllog", "execution"},
    {"parallel.data", "set execution"},
    {"parallel.shard", "set execution"},
};

// A config with every key written to_json may leave out (a custom shape, so the model's keys).
RunConfig shaped_config() {
  RunConfig c;
  c.model = ModelChoice::shaped({64, 2, 4, 2, 192});
  return c;
}

}  // namespace

TEST_CASE("every key of the config has a row in the key table, with the traits pinned here") {
  std::map<std::string, std::string> found;
  for (const std::string& path : leaf_paths(config_key_tree())) {
    INFO(path);
    const ConfigKey* row = config_key(path);
    REQUIRE(row != nullptr);  // a key without a row in config_keys.h
    found[path] = traits_of(*row);
    REQUIRE(kPinned.count(path) == 1);  // a key whose traits nobody pinned here
    CHECK(found[path] == kPinned.at(path));
  }
  for (const auto& [path, traits] : kPinned) {
    INFO(path);
    CHECK(found.count(path) == 1);  // a pinned key the config no longer has
  }
}

TEST_CASE("every row of the key table names a key or section of the config, and execution is all it is") {
  const json tree = config_key_tree();
  for (const ConfigKey& k : kConfigKeys) {
    INFO(std::string(k.path));
    CHECK(config_key(k.path) == &k);  // no row is listed twice
    const json* at = &tree;
    std::string rest(k.path);
    for (size_t dot = 0; at && dot != std::string::npos;) {
      dot = rest.find('.');
      const std::string key = rest.substr(0, dot);
      at = at->is_object() && at->contains(key) ? &(*at)[key] : nullptr;
      rest = dot == std::string::npos ? "" : rest.substr(dot + 1);
    }
    CHECK(at != nullptr);
    // Where a run executes never changes what it computes: not a trajectory, not an arm.
    if (k.has(kExecution)) CHECK_FALSE((k.has(kTrajectory) || k.has(kDescribesArm)));
  }
  CHECK(config_key("train.lr")->path == "train");
  CHECK(config_key("quant.dge.k")->path == "quant.dge");
  CHECK(config_key("trainer") == nullptr);  // a section's name is not a prefix of other keys
  CHECK(config_key("no_such_key") == nullptr);
}

TEST_CASE("the identity JSON leaves out exactly the keys written when set, while at their defaults") {
  const json compact = to_json(shaped_config());
  std::vector<std::string> left_out;
  for (const std::string& path : leaf_paths(to_json_full(shaped_config()))) {
    const json::json_pointer at("/" + [&path] {
      std::string p = path;
      for (char& ch : p)
        if (ch == '.') ch = '/';
      return p;
    }());
    if (!compact.contains(at)) left_out.push_back(path);
    else CHECK_FALSE(config_key(path)->has(kWrittenWhenSet));
  }
  CHECK(left_out == std::vector<std::string>{"model.norm_eps", "model.rope_theta", "overrides",
                                             "parallel.data", "parallel.shard", "precision_schedule",
                                             "quant.dge", "quant.fp8_amax_history", "quant.fp8_margin",
                                             "quant.fp8_scaling", "quant.occ", "quant.sr_prescale",
                                             "quant.weight_blocks", "target.hopeless_confidence",
                                             "target.stop_hopeless", "train.activation_checkpointing", "train.cuda_graphs",
                                             "train.deterministic", "train.fused_producers"});
  CHECK_FALSE(compact.contains("parallel"));  // a section left empty goes too
}

TEST_CASE("parallel.shard: an execution key, in the identity only when not none") {
  RunConfig c;
  c.train.micro_batch_tokens = c.data.seq_len;
  c.parallel.data = 2;
  const RunConfig two_ranks = c;
  CHECK(to_json(c)["parallel"] == json{{"data", 2}});
  c.parallel.shard = ShardLevel::kOptimizer;
  CHECK(to_json(c)["parallel"] == json{{"data", 2}, {"shard", "optimizer"}});
  CHECK(run_config_from_json(to_json(c)).parallel.shard == ShardLevel::kOptimizer);
  // Not an arm's difference, not part of the trajectory.
  CHECK(settings_difference(c, two_ranks).empty());
  CHECK(keys_with(to_json(c), kTrajectory) == keys_with(to_json(two_ranks), kTrajectory));
  CHECK_FALSE(keys_with(to_json(c), kTrajectory).contains("parallel"));
  // Even off one rank (a config the contract refuses) the writer leaves the default data out.
  RunConfig lone;
  lone.parallel.shard = ShardLevel::kGradients;
  CHECK(to_json(lone)["parallel"] == json{{"shard", "gradients"}});
}

TEST_CASE("keys_with takes the keys with a trait, sections key by key where their keys differ") {
  RunConfig c;
  c.train.activation_checkpointing = {Recompute::Mode::kAuto, 0};
  c.quant.dge = DgeConfig{};
  c.device = Device::kCUDA;
  const json full = to_json_full(c);
  const json t = keys_with(full, kTrajectory);
  CHECK(t.size() == 5);
  for (const char* section : {"model", "data", "precision", "quant"}) CHECK(t[section] == full[section]);
  json train = full["train"];
  train.erase("activation_checkpointing");
  train.erase("cuda_graphs");
  train.erase("fused_producers");
  CHECK(t["train"] == train);
  // Not a mapping, or a key without a row: taken as it is, or left out.
  CHECK(keys_with(json{{"train", 3}, {"no_such_key", 1}}, kTrajectory) == json{{"train", 3}});
  CHECK(keys_with(json::array(), kTrajectory) == json::object());
  const json execution = keys_with(full, kExecution);
  CHECK(execution == json{{"device", "cuda"},
                          {"threads", 0},
                          {"mllog", false},
                          {"parallel", full["parallel"]},
                          {"train", {{"activation_checkpointing", "auto"}, {"cuda_graphs", "auto"},
                                     {"fused_producers", false}}}});
}
