// Token data is checked before it is trained on: cheaply whenever a dataset is opened, fully by
// verify_dataset, and every token as it is read. A token outside the vocabulary or a shard that
// does not match its manifest is a DataError naming the file, position and value.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include "catch.h"
#include "mxablate/data/manifest.h"
#include "mxablate/data/sha256.h"
#include "mxablate/data/token_shards.h"
#include "hostile_json.h"
#include "test_support.h"

using namespace mxablate::data;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kVocab = 512;

fs::path fresh_dir(const char* name) {
  const fs::path dir = fs::temp_directory_path() / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write_shard(const fs::path& path, int64_t tokens) {
  std::vector<int32_t> t(static_cast<size_t>(tokens));
  for (int64_t i = 0; i < tokens; ++i) t[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7 + 3) % kVocab);
  TokenShardWriter w(path.string(), kVocab);
  w.append(t);
  w.close();
}

// A prepared data directory: a train shard of `train_tokens` and a validation shard.
fs::path make_dataset(const char* name, int64_t train_tokens) {
  const fs::path dir = fresh_dir(name);
  write_shard(dir / "train-0.bin", train_tokens);
  write_shard(dir / "val-0.bin", 4096);
  std::ofstream(dir / "tok.model") << "a tokenizer model";
  Manifest m;
  m.tokenizer.file = "tok.model";
  m.tokenizer.sha256 = sha256_file((dir / "tok.model").string());
  m.tokenizer.vocab_size = kVocab;
  m.bytes_per_token = 2;
  m.train = {1, train_tokens, {{"train-0.bin", train_tokens, sha256_file((dir / "train-0.bin").string())}}};
  m.validation = {1, 4096, {{"val-0.bin", 4096, sha256_file((dir / "val-0.bin").string())}}};
  write_manifest(dir.string(), m);
  return dir;
}

// Overwrites token `index` of a 16-bit shard in place.
void poke_token(const fs::path& shard, int64_t index, uint16_t value) {
  std::FILE* f = std::fopen(shard.string().c_str(), "r+b");
  REQUIRE(f);
  std::fseek(f, static_cast<long>(kShardHeaderBytes + 2 * index), SEEK_SET);
  const unsigned char bytes[2] = {static_cast<unsigned char>(value & 0xff),
                                  static_cast<unsigned char>(value >> 8)};
  std::fwrite(bytes, 1, 2, f);
  std::fclose(f);
}

std::string open_error(const fs::path& dir) {
  try {
    open_dataset(dir.string());
  } catch (const DataError& e) {
    return e.what();
  }
  return "opened";
}

}  // namespace

TEST_CASE("A token outside the vocabulary is never returned by a read", "[data][checks]") {
  const fs::path dir = fresh_dir("mxablate_data_oov_read");
  const fs::path path = dir / "s.bin";
  write_shard(path, 3000);
  poke_token(path, 1000, 65535);
  const TokenShard shard(path.string());
  std::vector<int32_t> out(100);
  CHECK_NOTHROW(shard.read(0, out));
  CHECK_THROWS_AS(shard.read(950, out), DataError);
  CHECK_THROWS_WITH(shard.read(950, out),
                    has_text(path.string() + ": token 1000 is 65535, outside the vocabulary of 512"));
  CHECK(shard.find_out_of_vocabulary(0, 3000) == std::optional<int64_t>(1000));
  CHECK_FALSE(shard.find_out_of_vocabulary(1001, 5000).has_value());
  // Through a stream of several shards, the error names the shard and its own position.
  TokenStream stream({path.string(), path.string()});
  std::vector<int32_t> across(10);
  CHECK_THROWS_WITH(stream.read(3000 + 995, across), has_text("s.bin: token 1000 is 65535"));
}

TEST_CASE("Opening a dataset checks the cheap things, verify_dataset checks everything", "[data][checks]") {
  SECTION("intact") {
    const fs::path dir = make_dataset("mxablate_data_ok", 200000);
    CHECK(open_error(dir) == "opened");
    CHECK(verify_dataset(dir.string()).empty());
  }
  SECTION("an out-of-vocabulary id near the start of a shard is caught at open") {
    const fs::path dir = make_dataset("mxablate_data_oov_start", 200000);
    poke_token(dir / "train-0.bin", 17, 60000);
    CHECK_THAT(open_error(dir), has_text("train-0.bin: token 17 is 60000, outside the vocabulary of 512"));
  }
  SECTION("one near the end too") {
    const fs::path dir = make_dataset("mxablate_data_oov_end", 200000);
    poke_token(dir / "train-0.bin", 199990, 512);
    CHECK_THAT(open_error(dir), has_text("train-0.bin: token 199990 is 512, outside the vocabulary"));
  }
  SECTION("one in the middle of a large shard: verify_dataset") {
    const fs::path dir = make_dataset("mxablate_data_oov_mid", 200000);
    poke_token(dir / "train-0.bin", 100000, 9999);
    CHECK(open_error(dir) == "opened");  // sampled checks do not reach it
    // The checksum sees the change first.
    CHECK_THAT(verify_dataset(dir.string()), has_text("train-0.bin: checksum does not match the manifest"));
    // With the manifest's checksum updated (a shard written with a bigger vocabulary), the
    // range check names the token.
    Manifest m = read_manifest(dir.string());
    m.train.shards[0].sha256 = sha256_file((dir / "train-0.bin").string());
    write_manifest(dir.string(), m);
    CHECK_THAT(verify_dataset(dir.string()), has_text("train-0.bin: token 100000 is 9999, outside the vocabulary of 512"));
  }
  SECTION("a changed byte within the vocabulary: only the checksum tells") {
    const fs::path dir = make_dataset("mxablate_data_flip", 200000);
    poke_token(dir / "train-0.bin", 5, 6);
    CHECK(open_error(dir) == "opened");
    CHECK(verify_dataset(dir.string()) == (dir / "train-0.bin").string() + ": checksum does not match the manifest");
  }
  SECTION("a shard whose length differs from the manifest's") {
    const fs::path dir = make_dataset("mxablate_data_len", 200000);
    write_shard(dir / "train-0.bin", 199999);
    CHECK_THAT(open_error(dir), has_text("shards hold 199999 tokens but the manifest says 200000"));
  }
  SECTION("manifest numbers that cannot be") {
    const fs::path dir = make_dataset("mxablate_data_manifest", 200000);
    Manifest m = read_manifest(dir.string());
    m.bytes_per_token = 4;
    write_manifest(dir.string(), m);
    CHECK_THAT(open_error(dir), has_text("bytes_per_token 4 does not fit a vocabulary of 512 (expected 2)"));
    m.bytes_per_token = 2;
    m.train.shards[0].tokens = -5;
    write_manifest(dir.string(), m);
    CHECK_THAT(open_error(dir), has_text("shard train-0.bin: token count -5 is out of range"));
    m.train.shards[0].tokens = 200000;
    m.tokenizer.vocab_size = int64_t{1} << 40;
    write_manifest(dir.string(), m);
    CHECK_THAT(open_error(dir), has_text("tokenizer.vocab_size 1099511627776 is out of range"));
  }
}

TEST_CASE("Every hostile value in manifest.json is one line naming the file and key", "[data][checks]") {
  const fs::path dir = make_dataset("mxablate_data_hostile_manifest", 5000);
  const fs::path path = dir / kManifestFile;
  const nlohmann::json good = to_json(read_manifest(dir.string()));
  struct Key {
    std::string pointer;
    std::string path;
  };
  const std::vector<Key> keys = {{"/version", "version"},
                                 {"/tokenizer/vocab_size", "tokenizer.vocab_size"},
                                 {"/tokenizer/eos_id", "tokenizer.eos_id"},
                                 {"/bytes_per_token", "bytes_per_token"},
                                 {"/splits/train/tokens", "splits.train.tokens"},
                                 {"/splits/validation/shards/0/tokens",
                                  "splits.validation.shards[0].tokens"}};
  for (const Key& key : keys)
    for (const auto& v : mxablate::test::hostile_integer_values()) {
      INFO(key.path << " = " << v.name);
      std::ofstream(path, std::ios::trunc) << mxablate::test::with_hostile_value(good, key.pointer, v);
      const std::string m = open_error(dir);
      CHECK(mxablate::test::is_one_clean_line(m));
      CHECK(m.rfind(path.string() + ": " + key.path + ": " + v.message, 0) == 0);
    }

  // Wrong shapes, strings and bytes: named the same way.
  const auto error_with = [&](const std::string& pointer, const nlohmann::json& value) {
    nlohmann::json j = good;
    j[nlohmann::json::json_pointer(pointer)] = value;
    std::ofstream(path, std::ios::trunc) << j.dump(2, ' ', false, nlohmann::json::error_handler_t::ignore);
    return open_error(dir);
  };
  const std::string at = path.string() + ": ";
  CHECK(error_with("/tokenizer/file", 5) == at + "tokenizer.file: expected a string, got 5");
  CHECK(error_with("/tokenizer/sha256", std::string("a\0b", 3)) ==
        at + "tokenizer.sha256: contains a NUL character, got \"a\\u0000b\"");
  CHECK(error_with("/tokenizer/trained_here", "yes") ==
        at + "tokenizer.trained_here: expected true or false, got \"yes\"");
  CHECK(error_with("/splits/train/shards", nlohmann::json::object()) ==
        at + "splits.train.shards: expected a list, got {}");
  CHECK(error_with("/sources", nlohmann::json::object({{"a", 1}})) ==
        at + "sources: expected a list, got {\"a\":1}");
  CHECK(error_with("/splits/train/shards/0", 7) == at + "splits.train.shards[0]: expected an object, got 7");
  CHECK(error_with("/tokenizer", "none") == at + "tokenizer: expected an object, got \"none\"");
  nlohmann::json missing = good;
  missing["splits"]["train"].erase("tokens");
  std::ofstream(path, std::ios::trunc) << missing.dump(2);
  CHECK(open_error(dir) == at + "splits.train.tokens: missing");

  // Bytes that are not UTF-8 or JSON, and nesting beyond 64 levels.
  std::string text = good.dump(2);
  text.replace(text.find("tok.model"), 3, "t\xff\xfe");
  std::ofstream(path, std::ios::trunc | std::ios::binary) << text;
  CHECK(open_error(dir).rfind(at + "tokenizer.file: not valid JSON at byte ", 0) == 0);
  text = good.dump(2);
  text.insert(1, "\"x\": " + std::string(100, '[') + std::string(100, ']') + ", ");
  std::ofstream(path, std::ios::trunc) << text;
  CHECK_THAT(open_error(dir), has_text(at + "x[0][0]"));
  CHECK_THAT(open_error(dir), has_text(": nested deeper than 64 levels"));
  std::ofstream(path, std::ios::trunc) << "";
  CHECK(open_error(dir) == at + "not valid JSON at byte 1 (unexpected end of input; expected '[', "
                                "'{', or a literal)");
  fs::remove(path);
  CHECK(open_error(dir) == at + "does not exist (is this a prepared data directory?)");
  fs::create_directory(path);
  CHECK(open_error(dir) == at + "not a regular file");
}
