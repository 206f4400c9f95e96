// mxablate-train against hostile inputs, as a process: damaged checkpoints (resume falls back to
// the newest intact one, the fallback is an event, the result equals an uninterrupted run),
// corrupted token data and out-of-range config values (exit 2 with one line).
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "catch.h"
#include "mxablate/data/manifest.h"
#include "mxablate/data/sha256.h"
#include "mxablate/data/token_shards.h"
#include "mxablate/trainer/rules/checkpoint_state.h"
#include "hostile_json.h"
#include "run_test_support.h"
#include "test_support.h"

using namespace mxablate;
using namespace mxablate::test;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

contract::RunConfig fallback_config() { return resume_config("fallback-run"); }

void rewrite_state(const fs::path& checkpoint, void (*change)(json&)) {
  std::ifstream in(checkpoint / "state.json");
  json j = json::parse(in);
  in.close();
  change(j);
  trainer::seal_checkpoint_state(j);
  std::ofstream(checkpoint / "state.json", std::ios::trunc) << j.dump(2);
}

void flip_byte(const fs::path& file, uintmax_t at) {
  std::FILE* f = std::fopen(file.string().c_str(), "r+b");
  REQUIRE(f);
  std::fseek(f, static_cast<long>(at), SEEK_SET);
  const int byte = std::fgetc(f);
  std::fseek(f, -1, SEEK_CUR);
  std::fputc(byte ^ 0x01, f);
  std::fclose(f);
}

}  // namespace

TEST_CASE("A damaged newest checkpoint: resume falls back to the one before, same result",
          "[train][resume][checkpoint]") {
  const contract::RunConfig c = fallback_config();
  static const std::vector<json> reference = [&] {
    const std::string straight = fresh_run_dir("fallback_straight");
    REQUIRE(run_train(straight, &c).exit_code == 0);
    return effective_events(straight);
  }();
  // Killed after step 10: checkpoints at steps 4 and 8. Made once, copied per section.
  static const std::string crashed = [&] {
    const std::string dir = fresh_run_dir("fallback_crashed");
    REQUIRE(run_train(dir, &c, "--debug-crash-at-step 10").exit_code == 137);
    REQUIRE(fs::exists(dir + "/checkpoints/step-00000008/state.json"));
    REQUIRE(fs::exists(dir + "/checkpoints/step-00000004/state.json"));
    return dir;
  }();
  const auto copy_crashed = [&](const std::string& name) {
    const std::string dir = fresh_run_dir(name);
    fs::copy(crashed, dir, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    return fs::path(dir);
  };

  std::string expected_reason;
  fs::path dir;
  SECTION("truncated model.pt") {
    dir = copy_crashed("fb_truncated");
    const fs::path f = dir / "checkpoints/step-00000008/model.pt";
    fs::resize_file(f, fs::file_size(f) - 100);
    expected_reason = "model.pt: ";
  }
  SECTION("a flipped byte in optimizer.pt") {
    dir = copy_crashed("fb_flipped");
    const fs::path f = dir / "checkpoints/step-00000008/optimizer.pt";
    flip_byte(f, fs::file_size(f) / 3);
    expected_reason = "optimizer.pt: checksum does not match state.json (the file is damaged)";
  }
  SECTION("a flipped byte in state.json") {
    dir = copy_crashed("fb_state_flip");
    flip_byte(dir / "checkpoints/step-00000008/state.json", 40);
    expected_reason = "state.json: ";
  }
  SECTION("a missing rng.pt") {
    dir = copy_crashed("fb_missing");
    fs::remove(dir / "checkpoints/step-00000008/rng.pt");
    expected_reason = "rng.pt: missing";
  }
  SECTION("state.json that is not JSON") {
    dir = copy_crashed("fb_garbage");
    std::ofstream(dir / "checkpoints/step-00000008/state.json", std::ios::trunc) << "{\"step\": 8,";
    expected_reason = "state.json: not valid JSON";
  }
  SECTION("a negative step, sealed with a matching checksum") {
    dir = copy_crashed("fb_negative");
    rewrite_state(dir / "checkpoints/step-00000008", [](json& j) { j["step"] = -8; });
    expected_reason = "state.json: step: -8 is negative";
  }
  SECTION("a step beyond the budget") {
    dir = copy_crashed("fb_beyond");
    rewrite_state(dir / "checkpoints/step-00000008", [](json& j) {
      j["step"] = 400;
      j["tokens"] = 400 * 1024;
      j["samples"] = 400 * 16;
    });
    expected_reason = "state.json: step 400 is beyond the run's 16 steps";
  }
  SECTION("a field of the wrong type") {
    dir = copy_crashed("fb_type");
    rewrite_state(dir / "checkpoints/step-00000008", [](json& j) { j["divergence"]["steps"] = "eight"; });
    expected_reason = "state.json: divergence.steps: expected an integer, got \"eight\"";
  }

  const TrainResult resumed = run_train(dir.string(), nullptr, "--resume");
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  CHECK_THAT(resumed.output, has_text("step-00000008 rejected: " + expected_reason));
  const auto events = effective_events(dir.string());
  const auto resumes = events_of_kind(events, "resume");
  REQUIRE(resumes.size() == 1);
  CHECK(resumes[0]["step"] == 4);
  CHECK(fs::path(resumes[0]["checkpoint"].get<std::string>()).filename() == "step-00000004");
  const auto rejected = events_of_kind(events, "checkpoint_rejected");
  REQUIRE(rejected.size() == 1);
  CHECK(fs::path(rejected[0]["path"].get<std::string>()).filename() == "step-00000008");
  CHECK_THAT(rejected[0]["reason"].get<std::string>(), has_text(expected_reason));
  CHECK(rejected[0]["reason"].get<std::string>().find('\n') == std::string::npos);
  CHECK(rejected[0]["seq"].get<int64_t>() > resumes[0]["seq"].get<int64_t>());
  CHECK(fs::exists(rejected[0]["moved_to"].get<std::string>()));
  // The run ends exactly as one never interrupted.
  CHECK(eval_curve(events) == eval_curve(reference));
  CHECK(events.back()["status"] == "budget_exhausted");
  std::vector<double> losses, ref_losses;
  for (const auto& e : events_of_kind(events, "train")) losses.push_back(e["loss"]);
  for (const auto& e : events_of_kind(reference, "train")) ref_losses.push_back(e["loss"]);
  CHECK(losses == ref_losses);
}

TEST_CASE("Resuming under another config refuses (exit 2) and sets nothing aside",
          "[train][resume][checkpoint]") {
  contract::RunConfig c = fallback_config();
  const std::string dir = fresh_run_dir("fb_other_config");
  REQUIRE(run_train(dir, &c, "--debug-crash-at-step 10").exit_code == 137);
  c.train.lr *= 2;  // the run directory reused for another config
  const TrainResult r = run_train(dir, &c, "--resume");
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, has_text("step-00000008: state.json: written under a different run config "
                                "(first difference at \"/train/lr\")"));
  CHECK(fs::exists(dir + "/checkpoints/step-00000008/state.json"));
  CHECK(fs::exists(dir + "/checkpoints/step-00000004/state.json"));
  CHECK_FALSE(fs::exists(dir + "/checkpoints/step-00000008.rejected"));
  const auto after = effective_events(dir);
  CHECK(events_of_kind(after, "checkpoint_rejected").empty());
  CHECK(events_of_kind(after, "resume").empty());
  // With its own config back, the run resumes from its newest checkpoint.
  c.train.lr /= 2;
  const TrainResult resumed = run_train(dir, &c, "--resume");
  INFO(resumed.output);
  CHECK(resumed.exit_code == 0);
  const auto resumes = events_of_kind(effective_events(dir), "resume");
  REQUIRE(resumes.size() == 1);
  CHECK(resumes[0]["step"] == 8);
}

TEST_CASE("No intact checkpoint: the run starts over, recording why", "[train][resume][checkpoint]") {
  const contract::RunConfig c = fallback_config();
  const std::string straight = fresh_run_dir("fb_none_straight");
  REQUIRE(run_train(straight, &c).exit_code == 0);
  const std::string dir = fresh_run_dir("fb_none");
  REQUIRE(run_train(dir, &c, "--debug-crash-at-step 10").exit_code == 137);
  rewrite_state(dir + "/checkpoints/step-00000008", [](json& j) { j["step"] = -1; });
  fs::resize_file(dir + "/checkpoints/step-00000004/model.pt", 10);
  const TrainResult resumed = run_train(dir, nullptr, "--resume");
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  CHECK_THAT(resumed.output, has_text("no intact checkpoint, starting over"));
  const auto events = effective_events(dir);
  REQUIRE(events.front()["kind"] == "resume");
  CHECK(events.front()["discard_after_seq"] == 0);
  const auto rejected = events_of_kind(events, "checkpoint_rejected");
  REQUIRE(rejected.size() == 2);
  CHECK(rejected[0]["reason"] == "state.json: step: -1 is negative");
  CHECK_THAT(rejected[1]["reason"].get<std::string>(), has_text("model.pt: 10 bytes, state.json records"));
  CHECK(eval_curve(events) == eval_curve(effective_events(straight)));
  // The negative step never reached the learning rate: no divergence was recorded.
  CHECK(events_of_kind(events, "divergence").empty());
}

TEST_CASE("Corrupted token data exits 2 with one line naming shard, position and id", "[train][data]") {
  const fs::path data = fs::path(fresh_run_dir("bad_data")) / "prepared";
  fs::copy(test_dataset(), data, fs::copy_options::recursive);
  data::Manifest m = data::read_manifest(data.string());
  const fs::path shard = data / m.train.shards[0].file;
  REQUIRE(m.bytes_per_token == 2);
  contract::RunConfig c = smoke_config();
  c.data.dataset = data.string();
  c.train.max_tokens = 1024 * 2;

  // A changed byte within the vocabulary: the shard no longer matches its manifest's checksum.
  flip_byte(shard, data::kShardHeaderBytes + 2 * 1000);
  TrainResult r = run_train(fresh_run_dir("bad_data_checksum"), &c);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, has_text(shard.string() + ": checksum does not match the manifest"));

  // An id outside the vocabulary (with the checksum updated, as a shard made with another
  // tokenizer would be): named by shard, position and id, before any step.
  {
    std::FILE* f = std::fopen(shard.string().c_str(), "r+b");
    REQUIRE(f);
    std::fseek(f, static_cast<long>(data::kShardHeaderBytes + 2 * 1234), SEEK_SET);
    const unsigned char id[2] = {0x10, 0x27};  // 10000
    std::fwrite(id, 1, 2, f);
    std::fclose(f);
  }
  m.train.shards[0].sha256 = data::sha256_file(shard.string());
  data::write_manifest(data.string(), m);
  const std::string run = fresh_run_dir("bad_data_oov");
  r = run_train(run, &c, "--verify-data");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, has_text(shard.string() + ": token 1234 is 10000, outside the vocabulary of 256"));
  CHECK((!fs::exists(run + "/events.jsonl") || events_of_kind(effective_events(run), "train").empty()));
}

TEST_CASE("Out-of-range numbers in config.json exit 2 naming file, key and value", "[train]") {
  const std::string dir = fresh_run_dir("bad_numbers");
  json j = contract::to_json(smoke_config());
  const auto exit_with = [&](const std::string& text) {
    std::ofstream(dir + "/config.json", std::ios::trunc) << text;
    return run_train(dir, nullptr);
  };
  std::string text = j.dump();
  const std::string lr = "\"lr\":" + j["train"]["lr"].dump();
  REQUIRE(text.find(lr) != std::string::npos);
  TrainResult r = exit_with(std::string(text).replace(text.find(lr), lr.size(), "\"lr\":1e400"));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, has_text(dir + "/config.json: train.lr: number overflow parsing '1e400'"));
  j["train"]["weight_decay"] = -0.5;
  r = exit_with(j.dump());
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, has_text(dir + "/config.json: train.weight_decay: must be >= 0, got -0.5"));
  j["train"]["weight_decay"] = 0.1;
  j["threads"] = 1000000;
  r = exit_with(j.dump());
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, has_text("threads: must be in [0, 1024]"));
}

TEST_CASE("A token outside the vocabulary met while training: exit 2, run_end failed naming it",
          "[train][data]") {
  // A synthetic dataset with a train shard long enough that the checks at open (the first and
  // last 64 Ki tokens) leave its middle unsampled, and every token there outside the vocabulary.
  const fs::path data = fs::path(fresh_run_dir("bad_data_midrun")) / "prepared";
  fs::create_directories(data);
  constexpr int64_t kVocab = 256, kTrain = 200000, kVal = 8192, kSampled = int64_t{1} << 16;
  const auto write_shard = [&](const std::string& name, int64_t n, bool poison) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = static_cast<int32_t>((i * 37 + 11) % kVocab);
    data::TokenShardWriter w((data / name).string(), kVocab);
    w.append(t);
    w.close();
    if (!poison) return;
    std::FILE* f = std::fopen((data / name).string().c_str(), "r+b");
    REQUIRE(f);
    const unsigned char id[2] = {0x10, 0x27};  // 10000
    for (int64_t i = kSampled; i < n - kSampled; ++i) {
      std::fseek(f, static_cast<long>(data::kShardHeaderBytes + 2 * i), SEEK_SET);
      std::fwrite(id, 1, 2, f);
    }
    std::fclose(f);
  };
  write_shard("train-00000.bin", kTrain, true);
  write_shard("validation-00000.bin", kVal, false);
  std::ofstream(data / "tokenizer.model") << "not used by the trainer";
  data::Manifest m;
  m.tokenizer.file = "tokenizer.model";
  m.tokenizer.sha256 = data::sha256_file((data / "tokenizer.model").string());
  m.tokenizer.vocab_size = kVocab;
  m.train = {1, kTrain, {{"train-00000.bin", kTrain, data::sha256_file((data / "train-00000.bin").string())}}};
  m.validation = {1, kVal, {{"validation-00000.bin", kVal, data::sha256_file((data / "validation-00000.bin").string())}}};
  data::write_manifest(data.string(), m);

  contract::RunConfig c = smoke_config();
  c.data.dataset = data.string();
  c.train.max_tokens = 1024 * 4;
  const std::string run = fresh_run_dir("bad_data_midrun_run");
  // No full verification at start, as for data bigger than 64 MiB.
  const TrainResult r = run_train(run, &c, "--debug-always-verify-data-bytes 0");
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, has_text((data / "train-00000.bin").string() + ": token ") &&
                           has_text(" is 10000, outside the vocabulary of 256"));
  const auto events = effective_events(run);
  REQUIRE_FALSE(events.empty());
  CHECK(events.back()["kind"] == "run_end");
  CHECK(events.back()["status"] == "failed");
  CHECK_THAT(events.back()["reason"].get<std::string>(), has_text("is 10000, outside the vocabulary of 256"));
  // The same data with the full check at start: refused before anything is trained.
  const std::string checked = fresh_run_dir("bad_data_midrun_checked");
  const TrainResult v = run_train(checked, &c);
  CHECK(v.exit_code == 2);
  CHECK_THAT(v.output, has_text("train-00000.bin: token 65536 is 10000"));
  CHECK_FALSE(fs::exists(checked + "/events.jsonl"));
}

TEST_CASE("Profiling flags: a bad window exits 2 naming it, a working profiler writes a trace",
          "[train][profile]") {
  const contract::RunConfig c = smoke_config();
  for (const char* steps : {"0:2", "3:2", "2:x", "", "1:2:3"}) {
    const std::string dir = fresh_run_dir("profile-bad");
    const std::string trace = (fs::path(dir) / "trace.json").string();
    const TrainResult r =
        run_train(dir, &c, std::string("--profile-steps '") + steps + "' --profile-trace " + trace);
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK(r.output.find("--profile-steps \"" + std::string(steps) + "\" needs the form FIRST:LAST") !=
          std::string::npos);
    CHECK_FALSE(fs::exists(fs::path(dir) / "events.jsonl"));  // refused before the run started
  }
  {  // a window without a trace path
    const std::string dir = fresh_run_dir("profile-no-path");
    const TrainResult r = run_train(dir, &c, "--profile-steps 1:2");
    CHECK(r.exit_code == 2);
  }
  const std::string dir = fresh_run_dir("profile-ok");
  const std::string trace = (fs::path(dir) / "trace.json").string();
  const TrainResult r = run_train(dir, &c, "--profile-steps 2:3 --profile-trace " + trace);
  INFO(r.output);
  if (r.exit_code == 2 && r.output.find("Kineto") != std::string::npos) {
    // Debian's LibTorch 1.13 is built without Kineto: refused up front, nothing trained.
    CHECK_FALSE(fs::exists(fs::path(dir) / "events.jsonl"));
    MXABLATE_SKIP("this LibTorch has no Kineto profiler: " + r.output);
  }
  REQUIRE(r.exit_code == 0);
  std::ifstream in(trace);
  const json t = json::parse(in);
  REQUIRE(t.contains("traceEvents"));
  bool saw_matmul = false;
  int step_marks = 0, pass_marks = 0;
  for (const json& e : t["traceEvents"]) {
    const std::string name = e.value("name", "");
    if (name.find("aten::mm") != std::string::npos) saw_matmul = true;
    // The host's phases that profile-summary.py splits the GPU's idle time by (the first
    // profiled step marked too: its mark begins after the profiler starts).
    if (name == "mxablate::step") ++step_marks;
    if (name == "mxablate::passes") ++pass_marks;
  }
  CHECK(saw_matmul);  // the profiled steps' GEMMs are in the trace, not only the probe's nothing
  CHECK(step_marks >= 1);
  CHECK(pass_marks == 2);
}

TEST_CASE("A hostile value in the data's manifest.json exits 2 with one line naming file and key",
          "[train][data]") {
  const fs::path data = fs::path(fresh_run_dir("hostile_manifest")) / "prepared";
  fs::copy(test_dataset(), data, fs::copy_options::recursive);
  const std::string manifest = (data / data::kManifestFile).string();
  const json good = data::to_json(data::read_manifest(data.string()));
  contract::RunConfig c = smoke_config();
  c.data.dataset = data.string();
  for (const auto& v : hostile_integer_values()) {
    INFO(v.name);
    std::ofstream(manifest, std::ios::trunc) << with_hostile_value(good, "/tokenizer/vocab_size", v);
    const TrainResult r = run_train(fresh_run_dir("hostile_manifest_run"), &c);
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK(r.output.find("json.exception") == std::string::npos);
    CHECK_THAT(r.output, has_text("mxablate-train: data.dataset: " + manifest +
                                  ": tokenizer.vocab_size: " + v.message));
  }
}
