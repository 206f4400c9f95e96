// The run config round-trips through JSON and rejects anything it does not understand, naming
// the key.
#include <filesystem>
#include <fstream>
#include <limits>

#include "catch.h"
#include "config_error.h"
#include "mxablate/contract/run_config.h"

using namespace mxablate::contract;
using nlohmann::json;

namespace {

using mxablate::test::error_of;
using mxablate::test::valid;

}  // namespace

TEST_CASE("a run config survives a JSON round trip unchanged") {
  RunConfig c;
  c.run_id = "abc123";
  c.sweep = "paper-arms";
  c.arm = "FDW+H16";
  c.model = "llama-20m";
  c.data.seq_len = 256;
  c.train.global_batch_tokens = 65536;
  c.train.max_tokens = 1e8;
  c.train.seed = 3;
  c.precision = {GemmPrecision::kMXFP4, GemmPrecision::kMXFP4, GemmPrecision::kMXFP4};
  c.quant.stochastic_rounding = {OperandClass::kGrad};
  c.quant.hadamard = {HadamardMode::kDeterministic, 16, {GemmKind::kWgrad, GemmKind::kDgrad}};
  c.quant.weight_blocks = mxablate::kernels::BlockShape::k2D;
  c.quant.sr_prescale = 0.75;
  c.quant.dge = DgeConfig{4, 2.5};
  c.quant.occ = OccConfig{0.995};
  c.quant.scale_rule = ScaleRule::kMse;
  c.precision_schedule = {{0.9, {GemmPrecision::kBF16, GemmPrecision::kBF16, GemmPrecision::kBF16}}};
  LayerOverride o{"blocks.0.*", {}};
  o.patch.fprop = GemmPrecision::kBF16;
  o.patch.dge = std::optional<DgeConfig>{};  // off for these layers
  o.patch.hadamard_size = 32;
  c.overrides = {o};
  c.target.val_loss = 3.3;
  c.device = Device::kCUDA;
  c.train.micro_batch_tokens = 16384;
  c.parallel.data = 4;
  const RunConfig back = run_config_from_json(to_json(c));
  CHECK(back.parallel.data == 4);
  CHECK(to_json(back) == to_json(c));
  CHECK(back.quant.hadamard.gemms == GemmSet{GemmKind::kDgrad, GemmKind::kWgrad});
  CHECK(back.quant.dge == DgeConfig{4, 2.5});
  CHECK(back.overrides == c.overrides);
  CHECK(back.precision_schedule == c.precision_schedule);
  CHECK(back.target.val_loss.value() == 3.3);
}

TEST_CASE("integral floats from YAML (100e6) are accepted as integers") {
  json j = valid();
  j["train"]["global_batch_tokens"] = 65536.0;
  j["data"]["seq_len"] = 512;
  CHECK(run_config_from_json(j).train.global_batch_tokens == 65536);
  j["train"]["global_batch_tokens"] = 65536.5;
  CHECK(error_of(j) == "train.global_batch_tokens: expected an integer, got 65536.5");
}

TEST_CASE("bad run configs are refused with the key path") {
  json j = valid();
  j["train"]["learning_rate"] = 1e-3;
  CHECK(error_of(j) == "train.learning_rate: unknown key");

  j = valid();
  j["quant"]["hadamard"]["size"] = 24;
  CHECK(error_of(j) == "quant.hadamard.size: must be one of 16, 32, 64, 128, got 24");

  j = valid();
  j["precision"]["wgrad"] = "fp4";
  CHECK(error_of(j) == "precision.wgrad: expected one of bf16, fp8, mxfp4, nvfp4, got \"fp4\"");

  j = valid();
  j["train"]["lr"] = "fast";
  CHECK(error_of(j) == "train.lr: expected a number, got \"fast\"");

  j = valid();
  j["quant"]["hadamard"]["gemms"] = json::array({"wgrad", "bprop"});
  CHECK(error_of(j) ==
        "quant.hadamard.gemms[1]: expected one of fprop, dgrad, wgrad, got \"bprop\"");

  j = valid();
  j["train"]["global_batch_tokens"] = 1000;  // seq_len 128 does not divide it
  CHECK(error_of(j) ==
        "train.global_batch_tokens: must be a positive multiple of data.seq_len, got 1000");

  j = valid();
  j["eval"] = 5;
  CHECK(error_of(j) == "eval: expected an object, got 5");

  CHECK(error_of(json::array()) == "config: expected an object, got []");
}

TEST_CASE("config files: written atomically, read back, errors name the file") {
  const auto dir = std::filesystem::temp_directory_path() / "mxablate_run_config_test";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "config.json").string();
  RunConfig c;
  c.run_id = "r1";
  write_run_config(path, c);
  CHECK(read_run_config(path).run_id == "r1");
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));

  std::ofstream(path) << "{\"model\": ";
  try {
    read_run_config(path);
    FAIL("expected an error");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()) == path + ": model: not valid JSON at byte 11 (unexpected end of "
                                          "input; expected '[', '{', or a literal)");
  }
  std::ofstream(path) << "{\"modle\": \"smoke\"}";
  try {
    read_run_config(path);
    FAIL("expected an error");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()) == path + ": modle: unknown key");
  }
  CHECK_THROWS_AS(read_run_config((dir / "missing.json").string()), ConfigError);
  std::filesystem::remove_all(dir);
}

TEST_CASE("every number out of range for its key is refused, naming key and value") {
  const auto with = [](const char* section, const char* key, json value) {
    json j = valid();
    if (*section) {
      j[section][key] = std::move(value);
    } else {
      j[key] = std::move(value);
    }
    return error_of(j);
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  // Non-finite values can only come from a config built in-process (YAML's .nan and .inf).
  CHECK(with("train", "lr", nan) == "train.lr: must be a finite number, got nan");
  CHECK(with("train", "weight_decay", inf) == "train.weight_decay: must be a finite number, got inf");
  CHECK(with("train", "max_tokens", -inf) == "train.max_tokens: must be a finite number, got -inf");
  CHECK(with("train", "global_batch_tokens", inf) ==
        "train.global_batch_tokens: expected an integer, got inf");
  // Ranges.
  CHECK(with("train", "weight_decay", -0.1) == "train.weight_decay: must be >= 0, got -0.1");
  CHECK(with("train", "weight_decay", 1e6) ==
        "train.weight_decay: must keep train.lr * train.weight_decay below 1 (the decay step; lr "
        "0.001), got 1000000.0");
  CHECK(with("train", "lr", 1e300) == "train.lr: must be at most 10, got 1e+300");
  CHECK(with("train", "lr", -1) == "train.lr: must be > 0, got -1.0");
  CHECK(with("train", "eps", 0) == "train.eps: must be > 0, got 0.0");
  CHECK(with("train", "eps", 2) == "train.eps: must be at most 1, got 2.0");
  CHECK(with("train", "beta2", 1) == "train.beta2: must be in [0, 1), got 1.0");
  CHECK(with("train", "max_tokens", 1e300) == "train.max_tokens: must be at most 9e15, got 1e+300");
  CHECK(with("train", "warmup_tokens", -5) == "train.warmup_tokens: must be >= 0, got -5.0");
  CHECK(with("eval", "every_tokens", 0) == "eval.every_tokens: must be > 0, got 0.0");
  CHECK(with("eval", "tokens", 1e300) == "eval.tokens: must be at most 9e15, got 1e+300");
  CHECK(with("data", "seq_len", 1 << 21) == "data.seq_len: must be at most 1048576, got 2097152");
  CHECK(with("", "threads", 100000) == "threads: must be in [0, 1024] (0: the library default), got 100000");
  CHECK(with("", "threads", -1) == "threads: must be in [0, 1024] (0: the library default), got -1");
  CHECK(with("divergence", "grad_norm_factor", 1) ==
        "divergence.grad_norm_factor: must be > 1, got 1.0");
  CHECK(with("target", "val_loss", -3) == "target.val_loss: must be > 0 (or null), got -3.0");
  // Steps are numbered in 32 bits: a budget needing more is refused, not wrapped.
  json j = valid();
  j["train"]["global_batch_tokens"] = 128;
  j["train"]["max_tokens"] = 1e15;
  CHECK(error_of(j) == "train.max_tokens: needs more than 4294967294 optimizer steps of "
                       "train.global_batch_tokens (the most a run can number), got 1e+15");
  // Huge integers: beyond int64, beyond int32, beyond what a double holds exactly.
  CHECK(with("train", "global_batch_tokens", json::parse("18446744073709551615")) ==
        "train.global_batch_tokens: out of range (an integer from -9223372036854775808 to "
        "9223372036854775807), got 18446744073709551615");
  CHECK(with("quant", "bf16_first_blocks", 4294967296LL) ==
        "quant.bf16_first_blocks: out of range (an integer from -2147483648 to 2147483647), got "
        "4294967296");
  CHECK(with("checkpoint", "every_steps", 1e18) ==
        "checkpoint.every_steps: out of range (beyond 9e15 write an integer digit by digit, "
        "without an exponent), got 1e+18");
  CHECK(with("train", "seed", -1) == "train.seed: must be >= 0, got -1");
  // Seeds may use the whole unsigned range when written as integers.
  CHECK(run_config_from_json([] {
          json v = valid();
          v["train"]["seed"] = json::parse("18446744073709551615");
          return v;
        }()).train.seed == 18446744073709551615ull);
  // Wrong types.
  CHECK(with("train", "lr", true) == "train.lr: expected a number, got true");
  CHECK(with("", "threads", "4") == "threads: expected an integer, got \"4\"");
  CHECK(with("", "mllog", 1) == "mllog: expected true or false, got 1");
  CHECK(with("", "model", json::array()) ==
        "model: expected a preset's name or a mapping of d_model, n_layers, n_heads, n_kv_heads "
        "and ffn_hidden (rope_theta and norm_eps optional), got []");
}

TEST_CASE("strings must be valid UTF-8 without NULs, messages stay printable") {
  json j = valid();
  j["model"] = std::string("sm\xff" "oke");
  CHECK(error_of(j) == "model: not valid UTF-8, got \"sm\xef\xbf\xbd" "oke\"");
  j = valid();
  j["data"]["dataset"] = std::string("a\0b", 3);
  CHECK(error_of(j) == "data.dataset: contains a NUL character, got \"a\\u0000b\"");
  j = valid();
  j["device"] = "gpu\n";
  CHECK(error_of(j) == "device: expected one of cpu, cuda, got \"gpu\\n\"");
}

TEST_CASE("config files: numbers JSON cannot hold and invalid UTF-8 are bad configs naming file and key") {
  const auto dir = std::filesystem::temp_directory_path() / "mxablate_run_config_range_test";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "config.json").string();
  const auto error_reading = [&](const std::string& text) {
    std::ofstream(path, std::ios::trunc | std::ios::binary) << text;
    try {
      read_run_config(path);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error_reading(R"({"train": {"lr": 1e400}})") ==
        path + ": train.lr: number overflow parsing '1e400' (not a finite double)");
  CHECK(error_reading(R"({"eval": {"tokens": 5}, "train": {"max_tokens": -1e999}})") ==
        path + ": train.max_tokens: number overflow parsing '-1e999' (not a finite double)");
  CHECK(error_reading(R"({"threads": 99999999999999999999999})") ==
        path + ": threads: out of range (beyond 9e15 write an integer digit by digit, without an "
               "exponent), got 9.999999999999999e+22");
  CHECK(error_reading(R"({"train": {"weight_decay": -1}})") ==
        path + ": train.weight_decay: must be >= 0, got -1.0");
  const std::string bad_utf8 = error_reading("{\"model\": \"sm\xff\xfeoke\"}");
  CHECK(bad_utf8.rfind(path + ": model: not valid JSON at byte 14 (invalid string: ill-formed "
                       "UTF-8 byte", 0) == 0);
  CHECK(bad_utf8.find('\xff') == std::string::npos);  // the message itself is printable
  CHECK(bad_utf8.find('\n') == std::string::npos);
  std::filesystem::remove_all(dir);
}

// ---- model: a preset's name or a shape given key by key (docs/design.md §4).

TEST_CASE("a preset model is written as its name, as before custom shapes (run ids unchanged)") {
  RunConfig c;
  c.model = "llama-20m";
  const json j = to_json(c);
  REQUIRE(j["model"].is_string());
  CHECK(j["model"] == "llama-20m");
  CHECK(to_json_full(c)["model"] == "llama-20m");
  const RunConfig back = run_config_from_json(j);
  CHECK(back.model.is_preset());
  CHECK(back.model == ModelChoice::named("llama-20m"));
  CHECK(model_label(back.model) == "llama-20m");
  // The default is the smoke preset, by name.
  CHECK(to_json(RunConfig{})["model"] == "smoke");
}

TEST_CASE("a custom model shape round-trips, writing rope_theta and norm_eps only when set") {
  RunConfig c;
  c.model = ModelChoice::shaped({512, 6, 8, 4, 1408});
  json j = to_json(c);
  CHECK(j["model"] == json{{"d_model", 512}, {"n_layers", 6}, {"n_heads", 8}, {"n_kv_heads", 4},
                           {"ffn_hidden", 1408}});
  RunConfig back = run_config_from_json(j);
  REQUIRE(back.model.custom);
  CHECK(back.model == c.model);
  CHECK(to_json(back) == j);
  CHECK(model_label(back.model) == "d512-L6-h8/4-f1408");
  // The full form (for comparisons) holds every key.
  CHECK(to_json_full(c)["model"]["rope_theta"] == 10000.0);
  CHECK(to_json_full(c)["model"]["norm_eps"] == 1e-5);

  c.model.custom->rope_theta = 500000;
  c.model.custom->norm_eps = 1e-6;
  j = to_json(c);
  CHECK(j["model"]["rope_theta"] == 500000.0);
  CHECK(j["model"]["norm_eps"] == 1e-6);
  back = run_config_from_json(j);
  CHECK(back.model == c.model);
  CHECK(model_label(back.model) == "d512-L6-h8/4-f1408-rt500000-eps1e-06");
  // Through the file, as the trainer reads it.
  const auto path = std::filesystem::temp_directory_path() / "mxablate-model-shape-config.json";
  write_run_config(path.string(), c);
  CHECK(read_run_config(path.string()).model == c.model);
  std::filesystem::remove(path);
}

TEST_CASE("a malformed model is refused at its key") {
  const auto with_model = [](const json& model) {
    json j = valid();
    j["model"] = model;
    return error_of(j);
  };
  const json shape{{"d_model", 64}, {"n_layers", 2}, {"n_heads", 4}, {"n_kv_heads", 2},
                   {"ffn_hidden", 192}};
  CHECK(with_model(shape) == "no error");
  CHECK(with_model(json::array({1})) ==
        "model: expected a preset's name or a mapping of d_model, n_layers, n_heads, n_kv_heads "
        "and ffn_hidden (rope_theta and norm_eps optional), got [1]");
  json m = shape;
  m.erase("n_kv_heads");
  CHECK(with_model(m) == "model.n_kv_heads: required (a custom model gives d_model, n_layers, "
                         "n_heads, n_kv_heads and ffn_hidden)");
  m = shape;
  m["d_modle"] = 64;
  CHECK(with_model(m) == "model.d_modle: unknown key");
  m = shape;
  m["d_model"] = 64.5;
  CHECK(with_model(m) == "model.d_model: expected an integer, got 64.5");
  m = shape;
  m["n_layers"] = "two";
  CHECK(with_model(m) == "model.n_layers: expected an integer, got \"two\"");
  m = shape;
  m["n_heads"] = 0;
  CHECK(with_model(m) == "model.n_heads: must be in [1, 1048576], got 0");
  m = shape;
  m["ffn_hidden"] = -192;
  CHECK(with_model(m) == "model.ffn_hidden: must be in [1, 1048576], got -192");
  // Hostile sizes: widths and depths whose products would overflow a parameter count.
  m = shape;
  m["d_model"] = int64_t{1} << 40;
  CHECK(with_model(m) == "model.d_model: must be in [1, 1048576], got 1099511627776");
  m = shape;
  m["n_layers"] = 1000000;
  CHECK(with_model(m) == "model.n_layers: must be in [1, 4096], got 1000000");
  m = shape;
  m["rope_theta"] = 0.0;
  CHECK(with_model(m) == "model.rope_theta: must be in (0, 1e12], got 0.0");
  m = shape;
  m["norm_eps"] = 1.0;
  CHECK(with_model(m) == "model.norm_eps: must be in (0, 1), got 1.0");
  CHECK(with_model("llama-\xff") == "model: not valid UTF-8, got \"llama-\xef\xbf\xbd\"");
}

TEST_CASE("parallel.data: written only off its default (run ids stay), and must split the step's micro-batches") {
  CHECK_FALSE(to_json(RunConfig{}).contains("parallel"));
  CHECK(to_json_full(RunConfig{})["parallel"]["data"] == 1);

  json j = valid();
  j["data"]["seq_len"] = 64;
  j["train"]["global_batch_tokens"] = 512;
  j["parallel"] = {{"data", 2}};
  // One micro-batch per step (micro_batch_tokens 0) cannot be shared by two ranks.
  CHECK(error_of(j).find("parallel.data: must divide the step's 1 micro-batches") == 0);
  j["train"]["micro_batch_tokens"] = 128;  // 4 micro-batches: 2 per rank
  CHECK(error_of(j) == "no error");
  CHECK(micro_batches_per_step(run_config_from_json(j)) == 4);
  j["parallel"]["data"] = 3;
  CHECK(error_of(j).find("parallel.data: must divide the step's 4 micro-batches") == 0);
  for (const json& bad : {json(0), json(-1), json(5000), json("two"), json(1.5)}) {
    j["parallel"]["data"] = bad;
    CHECK(error_of(j).rfind("parallel.data", 0) == 0);
  }
  j["parallel"] = {{"data", 2}, {"tensor", 2}};
  CHECK(error_of(j).rfind("parallel.tensor", 0) == 0);
}

TEST_CASE("target.stop_hopeless and hopeless_confidence: written only when set (run ids stay), the confidence in (0.5, 1)") {
  RunConfig c;
  CHECK_FALSE(to_json(c)["target"].contains("stop_hopeless"));
  CHECK_FALSE(to_json(c)["target"].contains("hopeless_confidence"));
  c.target.stop_hopeless = true;
  c.target.hopeless_confidence = 0.99;
  const json j = to_json(c);
  CHECK(j["target"]["stop_hopeless"] == true);
  CHECK(j["target"]["hopeless_confidence"] == 0.99);
  const RunConfig back = run_config_from_json(j);
  CHECK(back.target.stop_hopeless);
  CHECK(back.target.hopeless_confidence == 0.99);
  json bad = valid();
  bad["target"]["hopeless_confidence"] = 1.0;
  CHECK(error_of(bad) == "target.hopeless_confidence: must be in (0.5, 1), got 1.0");
  bad["target"]["hopeless_confidence"] = "high";
  CHECK(error_of(bad).find("target.hopeless_confidence: expected a number") == 0);
}

TEST_CASE("train.deterministic: written only when on (run ids stay), a trajectory setting, true or false") {
  RunConfig c;
  CHECK_FALSE(to_json(c)["train"].contains("deterministic"));
  const json default_identity = to_json(c);
  c.train.deterministic = true;
  const json j = to_json(c);
  CHECK(j["train"]["deterministic"] == true);
  CHECK(run_config_from_json(j).train.deterministic);
  CHECK(j != default_identity);  // other attention bits on CUDA: another run id
  json bad = valid();
  bad["train"]["deterministic"] = "yes";
  CHECK(error_of(bad) == "train.deterministic: expected true or false, got \"yes\"");
}
