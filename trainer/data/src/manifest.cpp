#include "mxablate/data/manifest.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <utility>

#include "mxablate/contract/json_file.h"
#include "mxablate/data/sha256.h"

namespace mxablate::data {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json split_json(const SplitInfo& s) {
  json shards = json::array();
  for (const auto& sh : s.shards)
    shards.push_back({{"file", sh.file}, {"tokens", sh.tokens}, {"sha256", sh.sha256}});
  return {{"documents", s.documents}, {"tokens", s.tokens}, {"shards", shards}};
}

// Keys are read by the rules of contract/json_file.h (finite numbers, integers that fit, UTF-8
// strings without NUL): docs/design.md §11, one definition of each rule. `where` is the key path
// of `j` ("" for the top); a refusal names the key's path, and read_manifest puts the file in
// front.
std::string key_path(const std::string& where, const std::string& key) {
  return where.empty() ? key : where + "." + key;
}

const json& member(const json& j, const std::string& key, const std::string& where) {
  if (!j.is_object())
    throw DataError((where.empty() ? std::string("manifest") : where) + ": expected an object, got " +
                    contract::shown_json(j));
  const auto it = j.find(key);
  if (it == j.end()) throw DataError(key_path(where, key) + ": missing");
  return *it;
}

template <typename T>
T required(const json& j, const std::string& key, const std::string& where) {
  const json& v = member(j, key, where);
  T out{};
  if (const std::string why = contract::json_to(v, out); !why.empty())
    throw DataError(key_path(where, key) + ": " + why);
  return out;
}

const json& required_list(const json& j, const std::string& key, const std::string& where) {
  const json& v = member(j, key, where);
  if (!v.is_array())
    throw DataError(key_path(where, key) + ": expected a list, got " + contract::shown_json(v));
  return v;
}

SplitInfo split_from_json(const json& j, const std::string& where) {
  SplitInfo s;
  s.documents = required<int64_t>(j, "documents", where);
  s.tokens = required<int64_t>(j, "tokens", where);
  const json& shards = required_list(j, "shards", where);
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string w = where + ".shards[" + std::to_string(i) + "]";
    s.shards.push_back({required<std::string>(shards[i], "file", w),
                        required<int64_t>(shards[i], "tokens", w),
                        required<std::string>(shards[i], "sha256", w)});
  }
  return s;
}

}  // namespace

json to_json(const Manifest& m) {
  json sources = json::array();
  for (const auto& s : m.sources)
    sources.push_back(
        {{"path", s.path}, {"bytes", s.bytes}, {"sha256", s.sha256}, {"documents", s.documents},
         {"text_bytes", s.text_bytes}, {"tokens", s.tokens}});
  json skipped = json::array();
  for (const auto& s : m.skipped) skipped.push_back({{"path", s.path}, {"reason", s.reason}});
  const TokenizerInfo& t = m.tokenizer;
  return {{"version", m.version},
          {"tokenizer",
           {{"file", t.file},
            {"type", t.type},
            {"model_type", t.model_type},
            {"trained_here", t.trained_here},
            {"given_path", t.given_path},
            {"sha256", t.sha256},
            {"vocab_size", t.vocab_size},
            {"unk_id", t.unk_id},
            {"bos_id", t.bos_id},
            {"eos_id", t.eos_id}}},
          {"bytes_per_token", m.bytes_per_token},
          {"splits", {{"train", split_json(m.train)}, {"validation", split_json(m.validation)}}},
          {"sources", sources},
          {"skipped", skipped},
          {"options", m.options}};
}

Manifest manifest_from_json(const json& j) {
  Manifest m;
  m.version = required<int>(j, "version", "");
  if (m.version != kManifestVersion)
    throw DataError("version: " + std::to_string(m.version) + " is not supported (expected " +
                    std::to_string(kManifestVersion) + "); re-run `mxablate data prepare`");
  const json& t = member(j, "tokenizer", "");
  m.tokenizer.file = required<std::string>(t, "file", "tokenizer");
  m.tokenizer.type = required<std::string>(t, "type", "tokenizer");
  m.tokenizer.model_type = required<std::string>(t, "model_type", "tokenizer");
  m.tokenizer.trained_here = required<bool>(t, "trained_here", "tokenizer");
  m.tokenizer.given_path = required<std::string>(t, "given_path", "tokenizer");
  m.tokenizer.sha256 = required<std::string>(t, "sha256", "tokenizer");
  m.tokenizer.vocab_size = required<int64_t>(t, "vocab_size", "tokenizer");
  m.tokenizer.unk_id = required<int64_t>(t, "unk_id", "tokenizer");
  m.tokenizer.bos_id = required<int64_t>(t, "bos_id", "tokenizer");
  m.tokenizer.eos_id = required<int64_t>(t, "eos_id", "tokenizer");
  if (m.tokenizer.vocab_size <= 0)
    throw DataError("tokenizer.vocab_size: must be > 0, got " +
                    std::to_string(m.tokenizer.vocab_size));
  m.bytes_per_token = required<int>(j, "bytes_per_token", "");
  const json& splits = member(j, "splits", "");
  m.train = split_from_json(member(splits, "train", "splits"), "splits.train");
  m.validation = split_from_json(member(splits, "validation", "splits"), "splits.validation");
  const json& sources = required_list(j, "sources", "");
  for (size_t i = 0; i < sources.size(); ++i) {
    const std::string w = "sources[" + std::to_string(i) + "]";
    m.sources.push_back({required<std::string>(sources[i], "path", w),
                         required<int64_t>(sources[i], "bytes", w),
                         required<std::string>(sources[i], "sha256", w),
                         required<int64_t>(sources[i], "documents", w)});
    // Older directories have no per-source counts: -1, shown as unknown.
    for (auto [key, field] : {std::pair{"text_bytes", &m.sources.back().text_bytes},
                              std::pair{"tokens", &m.sources.back().tokens}}) {
      if (!sources[i].contains(key)) continue;
      *field = required<int64_t>(sources[i], key, w);
      if (*field < -1)
        throw DataError(w + "." + key + ": must be >= -1, got " + std::to_string(*field));
    }
  }
  if (j.contains("skipped")) {
    const json& skipped = required_list(j, "skipped", "");
    for (size_t i = 0; i < skipped.size(); ++i) {
      const std::string w = "skipped[" + std::to_string(i) + "]";
      m.skipped.push_back({required<std::string>(skipped[i], "path", w),
                           required<std::string>(skipped[i], "reason", w)});
    }
  }
  if (j.contains("options")) m.options = j.at("options");
  return m;
}

Manifest read_manifest(const std::string& data_dir) {
  const std::string path = (fs::path(data_dir) / kManifestFile).string();
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw DataError(path + ": does not exist (is this a prepared data directory?)");
  // One reader for every JSON file (contract/json_file.h): out-of-range numbers, invalid JSON,
  // deep nesting and non-UTF-8 bytes are one line naming the file and the key or byte.
  json j;
  try {
    j = contract::parse_json_file(path);
  } catch (const contract::JsonFileError& e) {
    throw DataError(e.what());
  }
  try {
    return manifest_from_json(j);
  } catch (const DataError& e) {
    throw DataError(path + ": " + e.what());
  }
}

void write_manifest(const std::string& data_dir, const Manifest& m) {
  const fs::path path = fs::path(data_dir) / kManifestFile;
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) throw std::runtime_error(tmp.string() + ": cannot write the manifest");
    // Paths are the file system's bytes, not always UTF-8: shown with U+FFFD where they are not.
    out << to_json(m).dump(2, ' ', false, json::error_handler_t::replace) << "\n";
    if (!out) throw std::runtime_error(tmp.string() + ": write failed");
  }
  fs::rename(tmp, path);
}

namespace {

// Tokens range-checked at the start and the end of each shard when a dataset is opened: a shard
// written with another tokenizer or overwritten shows there cheaply; the rest is checked as it is
// read (TokenShard::read) and all of it by verify_dataset.
constexpr int64_t kSampledTokens = 1 << 16;

void check_manifest_numbers(const Manifest& m, const std::string& where) {
  const int64_t vocab = m.tokenizer.vocab_size;
  if (vocab <= 0 || vocab > 0x7fffffff)
    throw DataError(where + ": tokenizer.vocab_size " + std::to_string(vocab) + " is out of range");
  const int width = vocab <= 65536 ? 2 : 4;
  if (m.bytes_per_token != width)
    throw DataError(where + ": bytes_per_token " + std::to_string(m.bytes_per_token) +
                    " does not fit a vocabulary of " + std::to_string(vocab) + " (expected " +
                    std::to_string(width) + ")");
  for (const SplitInfo* split : {&m.train, &m.validation}) {
    int64_t sum = 0;
    for (const auto& sh : split->shards) {
      if (sh.tokens < 0 || sh.tokens > (int64_t{1} << 50))
        throw DataError(where + ": shard " + sh.file + ": token count " + std::to_string(sh.tokens) +
                        " is out of range");
      sum += sh.tokens;
    }
    if (sum != split->tokens)
      throw DataError(where + ": the shards' token counts add up to " + std::to_string(sum) +
                      ", not the split's " + std::to_string(split->tokens));
  }
}

}  // namespace

TokenDataset open_dataset(const std::string& data_dir) {
  TokenDataset ds;
  ds.dir = data_dir;
  ds.manifest = read_manifest(data_dir);
  const std::string manifest_path = (fs::path(data_dir) / kManifestFile).string();
  check_manifest_numbers(ds.manifest, manifest_path);
  const auto open_split = [&](const SplitInfo& split, const char* name) {
    std::vector<std::string> paths;
    for (const auto& sh : split.shards) paths.push_back((fs::path(data_dir) / sh.file).string());
    TokenStream stream(paths);
    if (stream.size() != split.tokens)
      throw DataError(data_dir + ": the " + std::string(name) + " shards hold " +
                      std::to_string(stream.size()) + " tokens but the manifest says " +
                      std::to_string(split.tokens));
    for (size_t i = 0; i < split.shards.size(); ++i) {
      const TokenShard& shard = *stream.shards()[i];
      if (shard.size() != split.shards[i].tokens)
        throw DataError(shard.path() + ": holds " + std::to_string(shard.size()) +
                        " tokens but the manifest says " + std::to_string(split.shards[i].tokens));
      if (shard.bytes_per_token() != ds.manifest.bytes_per_token)
        throw DataError(shard.path() + ": " + std::to_string(shard.bytes_per_token()) +
                        " bytes per token but the manifest says " +
                        std::to_string(ds.manifest.bytes_per_token));
      if (shard.vocab_size() != ds.manifest.tokenizer.vocab_size)
        throw DataError(shard.path() + ": vocabulary size " + std::to_string(shard.vocab_size()) +
                        " differs from the manifest's " +
                        std::to_string(ds.manifest.tokenizer.vocab_size));
      // The first and the last kSampledTokens, each token once (a short shard is one range).
      const int64_t head = std::min(shard.size(), kSampledTokens);
      const int64_t tail = std::max(head, shard.size() - kSampledTokens);
      for (const auto& [start, count] : {std::pair{int64_t{0}, head}, std::pair{tail, shard.size() - tail}})
        if (const auto bad = shard.find_out_of_vocabulary(start, count))
          throw DataError(shard.describe_token(*bad));
    }
    return stream;
  };
  ds.train = open_split(ds.manifest.train, "train");
  ds.validation = open_split(ds.manifest.validation, "validation");
  return ds;
}

std::string verify_dataset(const std::string& data_dir) {
  const Manifest m = read_manifest(data_dir);
  try {
    check_manifest_numbers(m, (fs::path(data_dir) / kManifestFile).string());
  } catch (const DataError& e) {
    return e.what();
  }
  for (const SplitInfo* split : {&m.train, &m.validation})
    for (const auto& sh : split->shards) {
      const std::string path = (fs::path(data_dir) / sh.file).string();
      try {
        if (sha256_file(path) != sh.sha256) return path + ": checksum does not match the manifest";
        const TokenShard shard(path);
        if (shard.vocab_size() != m.tokenizer.vocab_size)
          return path + ": vocabulary size " + std::to_string(shard.vocab_size()) +
                 " differs from the manifest's " + std::to_string(m.tokenizer.vocab_size);
        if (const auto bad = shard.find_out_of_vocabulary(0, shard.size()))
          return shard.describe_token(*bad);
      } catch (const std::runtime_error& e) {
        return e.what();
      }
    }
  if (m.tokenizer.file.empty()) return "";  // imported ids with no tokenizer file
  const std::string tok = (fs::path(data_dir) / m.tokenizer.file).string();
  try {
    if (sha256_file(tok) != m.tokenizer.sha256) return tok + ": checksum does not match the manifest";
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace mxablate::data
