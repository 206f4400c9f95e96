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
