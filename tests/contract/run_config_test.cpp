// The run config round-trips through JSON and rejects anything it does not understand, naming
// the key.
#include <filesystem>
#include <fstream>

#include "catch.h"
#include "mxablate/contract/run_config.h"

using namespace mxablate::contract;
using nlohmann::json;

namespace {

std::string error_of(const json& j) {
  try {
    run_config_from_json(j);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

json valid() { return to_json(RunConfig{}); }

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
  c.precision = {"mxfp4", "mxfp4", "mxfp4"};
  c.quant.stochastic_rounding = {"grad"};
  c.quant.hadamard = {"deterministic", 16, {"wgrad", "dgrad"}};
  c.target.val_loss = 3.3;
  c.device = "cuda";
  const RunConfig back = run_config_from_json(to_json(c));
  CHECK(to_json(back) == to_json(c));
  CHECK(back.quant.hadamard.gemms == std::vector<std::string>{"wgrad", "dgrad"});
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
        "quant.hadamard.gemms: expected one of fprop, dgrad, wgrad, got \"bprop\"");

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
    CHECK(std::string(e.what()).rfind(path + ": not valid JSON", 0) == 0);
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
