#include "mxablate/trainer/rules/checkpoint_state.h"

#include <cstdio>

#include <algorithm>
#include <cctype>
#include <limits>

#include "mxablate/contract/config_keys.h"
#include "mxablate/contract/json_file.h"
#include "mxablate/contract/run_config.h"
#include "mxablate/data/sha256.h"
#include "mxablate/trainer/rules/divergence.h"

namespace mxablate::trainer {
namespace {

using nlohmann::json;

[[noreturn]] void reject(const std::string& why) {
  throw CheckpointRejected(std::string(kCheckpointStateFile) + ": " + why);
}

// A value in a message: JSON text, invalid UTF-8 replaced, at most 80 characters.
std::string shown(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

// Fields are named in messages by their path: `prefix` is "" or e.g. "files.model.pt.".
const json& member(const json& j, const char* key, const std::string& prefix = "") {
  const auto it = j.find(key);
  if (it == j.end()) reject(prefix + key + ": missing");
  return *it;
}

// Values by the rules every JSON reader shares (contract/json_file.h, docs/design.md §11).
template <typename T>
T typed(const json& j, const char* key, const std::string& prefix) {
  T out{};
  if (const std::string why = contract::json_to(member(j, key, prefix), out); !why.empty())
    reject(prefix + key + ": " + why);
  return out;
}

int64_t integer(const json& j, const char* key, const std::string& prefix = "") {
  return typed<int64_t>(j, key, prefix);
}

int64_t count(const json& j, const char* key, const std::string& prefix = "") {
  const int64_t n = integer(j, key, prefix);
  if (n < 0) reject(prefix + key + ": " + std::to_string(n) + " is negative");
  return n;
}

std::string text(const json& j, const char* key, const std::string& prefix = "") {
  return typed<std::string>(j, key, prefix);
}

bool is_sha256(const std::string& s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return std::isdigit(static_cast<unsigned char>(c)) || (c >= 'a' && c <= 'f');
         });
}

std::string digest_of(const json& body) {
  data::Sha256 hash;
  hash.update(body.dump());
  return hash.hex_digest();
}

CheckpointFile listed_file(const json& files, const std::string& name) {
  const auto it = files.find(name);
  if (it == files.end()) reject("files: " + name + " is not listed");
  const json& f = *it;
  if (!f.is_object()) reject("files." + name + ": expected an object, got " + shown(f));
  CheckpointFile file;
  file.name = name;
  file.bytes = count(f, "bytes", "files." + name + ".");
  file.sha256 = text(f, "sha256", "files." + name + ".");
  if (!is_sha256(file.sha256)) reject("files." + name + ".sha256: not a SHA-256 digest");
  return file;
}

// The listed files: the fixed ones, then the optimizer's — kOptimizerFile, or a complete set of
// shards (every rank of one count, nothing else).
std::vector<CheckpointFile> files_of(const json& j, int& optimizer_shards) {
  const json& files = member(j, "files");
  if (!files.is_object()) reject("files: expected an object, got " + shown(files));
  std::vector<CheckpointFile> out;
  for (const std::string& name : checkpoint_tensor_files()) out.push_back(listed_file(files, name));
  optimizer_shards = 0;
  if (files.contains(kOptimizerFile)) {
    out.push_back(listed_file(files, kOptimizerFile));
  } else {
    for (const auto& item : files.items())
      if (const auto shard = parse_optimizer_shard_file(item.key())) {
        optimizer_shards = shard->second;
        break;
      }
    if (optimizer_shards == 0) reject(std::string("files: ") + kOptimizerFile + " is not listed");
    for (int r = 0; r < optimizer_shards; ++r) out.push_back(listed_file(files, optimizer_shard_file(r, optimizer_shards)));
  }
  if (files.size() != out.size()) reject("files: lists files a checkpoint does not have");
  return out;
}

// `a` == n * `per` without overflowing.
bool is_product(int64_t a, int64_t n, int64_t per) {
  if (per <= 0) return false;
  return a % per == 0 && a / per == n;
}

}  // namespace

std::string optimizer_shard_file(int rank, int shards) {
  char name[64];
  std::snprintf(name, sizeof name, "optimizer-shard-%05d-of-%05d.pt", rank, shards);
  return name;
}

std::optional<std::pair<int, int>> parse_optimizer_shard_file(std::string_view name) {
  constexpr std::string_view kHead = "optimizer-shard-", kOf = "-of-", kTail = ".pt";
  if (name.size() != kHead.size() + 5 + kOf.size() + 5 + kTail.size()) return std::nullopt;
  if (name.substr(0, kHead.size()) != kHead) return std::nullopt;
  const auto number = [&](size_t at) -> std::optional<int> {
    int v = 0;
    for (size_t i = at; i < at + 5; ++i) {
      if (name[i] < '0' || name[i] > '9') return std::nullopt;
      v = v * 10 + (name[i] - '0');
    }
    return v;
  };
  const size_t of = kHead.size() + 5;
  if (name.substr(of, kOf.size()) != kOf || name.substr(of + kOf.size() + 5) != kTail) return std::nullopt;
  const auto rank = number(kHead.size()), shards = number(of + kOf.size());
  if (!rank || !shards || *shards < 2 || *shards > kMaxOptimizerShards || *rank >= *shards) return std::nullopt;
  return std::make_pair(*rank, *shards);
}

json trajectory_config(const json& c) {
  return contract::keys_with(c, contract::kTrajectory);
}

void seal_checkpoint_state(json& state) {
  state.erase("checksum");
  state["checksum"] = digest_of(state);
}

std::string checkpoint_state_text(const TrainerState& s, const std::vector<CheckpointFile>& files,
                                  const std::string& run_id, const json& trajectory) {
  json listed = json::object();
  for (const auto& f : files) listed[f.name] = {{"bytes", f.bytes}, {"sha256", f.sha256}};
  json state = {
      {"version", kCheckpointVersion},
      {"run_id", run_id},
      {"step", s.step},
      {"tokens", s.tokens},
      {"samples", s.samples},
      {"target_reached", s.target_reached},
      {"divergence", s.divergence},
      {"events_seq", s.events_seq},
      {"trajectory_config", trajectory},
      {"files", listed},
  };
  seal_checkpoint_state(state);
  return state.dump(2) + "\n";
}

CheckpointState parse_checkpoint_state(std::string_view text_in, const CheckpointExpectation& expect) {
  // The one JSON reader (contract/json_file.h): a number beyond a double, deep nesting or bytes
  // that are not JSON are a rejection naming the key or byte, never the library's exception.
  json j;
  try {
    j = contract::parse_json_text(text_in, kCheckpointStateFile);
  } catch (const contract::JsonFileError& e) {
    throw CheckpointRejected(e.what());
  }
  if (!j.is_object()) reject("expected an object, got " + shown(j));

  // Integrity first: any byte changed since the save shows here, before a field is trusted.
  const std::string checksum = text(j, "checksum");
  json body = j;
  body.erase("checksum");
  if (checksum != digest_of(body)) reject("checksum does not match its contents (the file is damaged)");

  const json& version = member(j, "version");
  if (!version.is_number_integer() || version.get<int64_t>() != kCheckpointVersion)
    reject("version " + shown(version) + " is not supported (this trainer writes " +
           std::to_string(kCheckpointVersion) + ")");

  // Whose checkpoint it is.
  const std::string run_id = text(j, "run_id");
  if (run_id != expect.run_id)
    throw CheckpointOfAnotherRun(std::string(kCheckpointStateFile) + ": written by run " +
                                 shown(json(run_id)) + ", not this run " + shown(json(expect.run_id)));
  const json& saved = member(j, "trajectory_config");
  if (saved != expect.trajectory_config) {
    const json diff = json::diff(saved, expect.trajectory_config);
    const std::string where =
        diff.empty() || !diff[0].is_object() ? "?" : diff[0].value("path", std::string("?"));
    throw CheckpointOfAnotherRun(std::string(kCheckpointStateFile) +
                                 ": written under a different run config (first difference at " +
                                 shown(json(where)) +
                                 "); resume needs the same model, data, train, precision and quant");
  }

  // Whether its counters describe a state this run can be in.
  CheckpointState out;
  TrainerState& s = out.state;
  s.step = count(j, "step");
  if (s.step > expect.total_steps)
    reject("step " + std::to_string(s.step) + " is beyond the run's " +
           std::to_string(expect.total_steps) + " steps");
  if (expect.step_in_name && s.step != *expect.step_in_name)
    reject("step " + std::to_string(s.step) + " differs from the step in the directory name (" +
           std::to_string(*expect.step_in_name) + ")");
  s.tokens = count(j, "tokens");
  if (!is_product(s.tokens, s.step, expect.tokens_per_step))
    reject("tokens " + std::to_string(s.tokens) + " is not step " + std::to_string(s.step) + " x " +
           std::to_string(expect.tokens_per_step) + " tokens per step");
  s.samples = count(j, "samples");
  if (!is_product(s.samples, s.step, expect.samples_per_step))
    reject("samples " + std::to_string(s.samples) + " is not step " + std::to_string(s.step) +
           " x " + std::to_string(expect.samples_per_step) + " sequences per step");
  const json& reached = member(j, "target_reached");
  if (!reached.is_boolean()) reject("target_reached: expected true or false, got " + shown(reached));
  s.target_reached = reached.get<bool>();
  s.events_seq = count(j, "events_seq");
  s.divergence = member(j, "divergence");
  try {
    DivergenceDetector probe{contract::DivergenceConfig{}};
    probe.restore(s.divergence);
  } catch (const std::invalid_argument& e) {
    reject(e.what());
  }
  out.files = files_of(j, out.optimizer_shards);
  return out;
}

}  // namespace mxablate::trainer
