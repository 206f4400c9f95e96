// A checkpoint's state.json is verified before anything is restored from it: a damaged file, an
// impossible state or another run's checkpoint is rejected with one line saying why.
#include <fstream>
#include <sstream>
#include <string>

#include "catch.h"
#include "mxablate/contract/run_config.h"
#include "mxablate/trainer/rules/checkpoint_state.h"
#include "mxablate/trainer/rules/divergence.h"
#include "hostile_json.h"
#include "test_support.h"

using namespace mxablate;
using namespace mxablate::trainer;
using nlohmann::json;

namespace {

const std::string kDigest(64, 'a');

CheckpointExpectation expectation() {
  CheckpointExpectation e;
  e.run_id = "run-1";
  e.trajectory_config = {{"model", "smoke"}, {"train", {{"lr", 0.001}}}};
  e.total_steps = 40;
  e.tokens_per_step = 1024;
  e.samples_per_step = 16;
  e.step_in_name = 10;
  return e;
}

std::string good_text() {
  TrainerState s;
  s.step = 10;
  s.tokens = 10240;
  s.samples = 160;
  s.events_seq = 17;
  DivergenceDetector d(contract::DivergenceConfig{});
  for (int i = 0; i < 10; ++i) d.observe_step(4.0, 1.0);
  s.divergence = d.state();
  std::vector<CheckpointFile> files;
  for (const auto& name : checkpoint_tensor_files()) files.push_back({name, 1000, kDigest});
  files.push_back({kOptimizerFile, 1000, kDigest});
  return checkpoint_state_text(s, files, "run-1", expectation().trajectory_config);
}

// A sharded run's state.json: the optimizer as `shards` files, one per rank.
std::string sharded_text(int shards) {
  json j = json::parse(good_text());
  j["files"].erase(kOptimizerFile);
  for (int r = 0; r < shards; ++r)
    j["files"][optimizer_shard_file(r, shards)] = {{"bytes", 1000}, {"sha256", kDigest}};
  seal_checkpoint_state(j);
  return j.dump();
}

std::string rejection(const std::string& text, const CheckpointExpectation& e = expectation()) {
  try {
    parse_checkpoint_state(text, e);
  } catch (const CheckpointRejected& r) {
    const std::string what = r.what();
    CHECK(what.find('\n') == std::string::npos);
    return what;
  }
  return "accepted";
}

// The state with one change, sealed again (as a writer with a bug, or a forger, would).
std::string resealed(void (*change)(json&)) {
  json j = json::parse(good_text());
  change(j);
  seal_checkpoint_state(j);
  return j.dump(2);
}

}  // namespace

TEST_CASE("A checkpoint state round-trips and verifies", "[trainer][checkpoint]") {
  const CheckpointState cs = parse_checkpoint_state(good_text(), expectation());
  CHECK(cs.state.step == 10);
  CHECK(cs.state.tokens == 10240);
  CHECK(cs.state.samples == 160);
  CHECK(cs.state.events_seq == 17);
  REQUIRE(cs.files.size() == 3);
  CHECK(cs.files[0].name == "model.pt");
  CHECK(cs.files[2].sha256 == kDigest);
}

TEST_CASE("A sharded checkpoint lists one optimizer shard per rank, all of them", "[trainer][checkpoint]") {
  CHECK(optimizer_shard_file(1, 4) == "optimizer-shard-00001-of-00004.pt");
  CHECK(parse_optimizer_shard_file("optimizer-shard-00001-of-00004.pt") == std::make_pair(1, 4));
  for (const char* bad : {"optimizer-shard-00004-of-00004.pt", "optimizer-shard-00000-of-00001.pt",
                          "optimizer-shard-0001-of-00004.pt", "optimizer-shard-00001-of-00004.ptx",
                          "optimizer-shard-0000a-of-00004.pt", "optimizer.pt", ""})
    CHECK_FALSE(parse_optimizer_shard_file(bad).has_value());
  const CheckpointState cs = parse_checkpoint_state(sharded_text(4), expectation());
  CHECK(cs.optimizer_shards == 4);
  REQUIRE(cs.files.size() == 6);
  CHECK(cs.files[2].name == "optimizer-shard-00000-of-00004.pt");
  CHECK(cs.files[5].name == "optimizer-shard-00003-of-00004.pt");
  CHECK(parse_checkpoint_state(good_text(), expectation()).optimizer_shards == 0);

  // A shard missing, a stray one of another count, or both layouts at once: not a checkpoint.
  json missing = json::parse(sharded_text(4));
  missing["files"].erase(optimizer_shard_file(2, 4));
  seal_checkpoint_state(missing);
  CHECK(rejection(missing.dump()) == "state.json: files: optimizer-shard-00002-of-00004.pt is not listed");
  json stray = json::parse(sharded_text(2));
  stray["files"][optimizer_shard_file(2, 3)] = {{"bytes", 1000}, {"sha256", kDigest}};
  seal_checkpoint_state(stray);
  CHECK(rejection(stray.dump()) == "state.json: files: lists files a checkpoint does not have");
  json both = json::parse(sharded_text(2));
  both["files"][kOptimizerFile] = {{"bytes", 1000}, {"sha256", kDigest}};
  seal_checkpoint_state(both);
  CHECK(rejection(both.dump()) == "state.json: files: lists files a checkpoint does not have");
  json none = json::parse(good_text());
  none["files"].erase(kOptimizerFile);
  seal_checkpoint_state(none);
  CHECK(rejection(none.dump()) == "state.json: files: optimizer.pt is not listed");
}

TEST_CASE("A damaged state file is rejected by its checksum", "[trainer][checkpoint]") {
  std::string text = good_text();
  // A digit flipped inside a number: still valid JSON, caught by the checksum.
  const size_t at = text.find("\"events_seq\": 17");
  REQUIRE(at != std::string::npos);
  text[at + 15] = '8';
  CHECK(rejection(text) == "state.json: checksum does not match its contents (the file is damaged)");
  // Not JSON: named by the key being read, or the byte where no key is known.
  CHECK_THAT(rejection(good_text().substr(0, 100)), has_text(": not valid JSON at byte 101 ("));
  CHECK(rejection("") == "state.json: not valid JSON at byte 1 (unexpected end of input; "
                         "expected '[', '{', or a literal)");
  CHECK(rejection("[1, 2]") == "state.json: expected an object, got [1,2]");
  CHECK(rejection("{\"step\": 3}") == "state.json: checksum: missing");
  CHECK(rejection(std::string("{\"a\": \"\xff\"}")) ==
        "state.json: a: not valid JSON at byte 8 (invalid string: ill-formed UTF-8 byte; last "
        "read: '\"?')");
}

TEST_CASE("Impossible states are rejected even with a matching checksum", "[trainer][checkpoint]") {
  CHECK(rejection(resealed([](json& j) { j["step"] = -10; })) == "state.json: step: -10 is negative");
  CHECK(rejection(resealed([](json& j) { j["step"] = 50; j["tokens"] = 51200; j["samples"] = 800; }),
                  [] {
                    auto e = expectation();
                    e.step_in_name.reset();
                    return e;
                  }()) == "state.json: step 50 is beyond the run's 40 steps");
  CHECK(rejection(resealed([](json& j) { j["step"] = 9; j["tokens"] = 9216; j["samples"] = 144; })) ==
        "state.json: step 9 differs from the step in the directory name (10)");
  CHECK(rejection(resealed([](json& j) { j["tokens"] = 10000; })) ==
        "state.json: tokens 10000 is not step 10 x 1024 tokens per step");
  CHECK(rejection(resealed([](json& j) { j["samples"] = 7; })) ==
        "state.json: samples 7 is not step 10 x 16 sequences per step");
  CHECK(rejection(resealed([](json& j) { j["step"] = "10"; })) ==
        "state.json: step: expected an integer, got \"10\"");
  CHECK(rejection(resealed([](json& j) { j["step"] = 1e300; })) ==
        "state.json: step: out of range (beyond 9e15 write an integer digit by digit, without an "
        "exponent), got 1e+300");
  CHECK(rejection(resealed([](json& j) { j["events_seq"] = -1; })) ==
        "state.json: events_seq: -1 is negative");
  CHECK(rejection(resealed([](json& j) { j.erase("samples"); })) == "state.json: samples: missing");
  CHECK(rejection(resealed([](json& j) { j["target_reached"] = 1; })) ==
        "state.json: target_reached: expected true or false, got 1");
  CHECK(rejection(resealed([](json& j) { j["divergence"]["grad_norms"] = "many"; })) ==
        "state.json: divergence.grad_norms: expected a list of at most 64 numbers");
  CHECK(rejection(resealed([](json& j) { j["version"] = 1; })) ==
        "state.json: version 1 is not supported (this trainer writes 2)");
  CHECK(rejection(resealed([](json& j) { j["files"].erase("rng.pt"); })) ==
        "state.json: files: rng.pt is not listed");
  CHECK(rejection(resealed([](json& j) { j["files"]["model.pt"]["sha256"] = "abc"; })) ==
        "state.json: files.model.pt.sha256: not a SHA-256 digest");
  CHECK(rejection(resealed([](json& j) { j["files"]["model.pt"]["bytes"] = -4; })) ==
        "state.json: files.model.pt.bytes: -4 is negative");
  CHECK(rejection(resealed([](json& j) { j["files"]["extra.pt"] = j["files"]["rng.pt"]; })) ==
        "state.json: files: lists files a checkpoint does not have");
}

TEST_CASE("Another run's checkpoint is rejected as another run's, not as damage", "[trainer][checkpoint]") {
  CHECK_THROWS_AS(parse_checkpoint_state(resealed([](json& j) { j["run_id"] = "run-2"; }), expectation()),
                  CheckpointOfAnotherRun);
  CHECK_THROWS_AS(parse_checkpoint_state(resealed([](json& j) { j["trajectory_config"]["train"]["lr"] = 0.5; }),
                                         expectation()),
                  CheckpointOfAnotherRun);
  // Damage is not another run's: the caller falls back from it.
  try {
    parse_checkpoint_state(resealed([](json& j) { j["step"] = -1; }), expectation());
    FAIL("a negative step was accepted");
  } catch (const CheckpointOfAnotherRun&) {
    FAIL("a negative step was taken for another run's checkpoint");
  } catch (const CheckpointRejected&) {
  }
  CHECK(rejection(resealed([](json& j) { j["run_id"] = "run-2"; })) ==
        "state.json: written by run \"run-2\", not this run \"run-1\"");
  CHECK(rejection(resealed([](json& j) { j["trajectory_config"]["train"]["lr"] = 0.002; })) ==
        "state.json: written under a different run config (first difference at \"/train/lr\"); "
        "resume needs the same model, data, train, precision and quant");
}

TEST_CASE("The fuzz target's seed state is accepted", "[trainer][checkpoint]") {
  std::ifstream in(MXABLATE_CHECKPOINT_FUZZ_SEED);
  REQUIRE(in);
  std::stringstream text;
  text << in.rdbuf();
  CheckpointExpectation e = expectation();
  e.run_id = "fuzz-run";
  e.total_steps = 100;
  e.step_in_name.reset();
  CHECK(parse_checkpoint_state(text.str(), e).state.step == 10);
}

TEST_CASE("A checkpoint resumes with activation checkpointing switched, not with a numerics change",
          "[trainer][checkpoint]") {
  contract::RunConfig c;
  const json off = trajectory_config(contract::to_json(c));
  c.train.activation_checkpointing = {contract::Recompute::Mode::kAll, 0};
  const json on = trajectory_config(contract::to_json(c));
  CHECK(contract::to_json(c)["train"]["activation_checkpointing"] == true);
  CHECK(on == off);  // it changes no result: not part of the trajectory
  CHECK_FALSE(on["train"].contains("activation_checkpointing"));
  c.train.lr *= 2;
  CHECK(trajectory_config(contract::to_json(c)) != off);
  // A config without a train section (or with one that is not an object) is taken as it is.
  CHECK(trajectory_config(json{{"model", "smoke"}}) == json{{"model", "smoke"}});
  CHECK(trajectory_config(json{{"train", 3}}) == json{{"train", 3}});
}

TEST_CASE("Hostile numbers and bytes in state.json are one line naming the key", "[trainer][checkpoint]") {
  // Parse errors come before the checksum; values JSON can hold are sealed again so that they
  // reach the field's own check.
  const json good = json::parse(good_text());
  for (const std::string pointer : {"/step", "/files/model.pt/bytes", "/divergence/steps"}) {
    const std::string key = pointer == "/step" ? "step"
                            : pointer == "/divergence/steps" ? "divergence.steps"
                                                             : "files.model.pt.bytes";
    for (const auto& v : test::hostile_integer_values()) {
      INFO(pointer << " = " << v.name);
      std::string text = test::with_hostile_value(good, pointer, v);
      if (v.message.rfind("not valid JSON", 0) != 0 && v.message.rfind("number overflow", 0) != 0) {
        json j = json::parse(text);
        seal_checkpoint_state(j);
        text = j.dump(2);
      }
      const std::string m = rejection(text);
      CHECK(test::is_one_clean_line(m));
      CHECK(m.rfind("state.json: " + key + ": " + v.message, 0) == 0);
    }
  }
}
