// `data import --megatron` as a library: every token of a hand-built indexed dataset lands in
// the split its document belongs to, whole and in order, for every integer dtype; the manifest
// records the sources and parameters; `data verify`'s check passes; a failed import leaves
// nothing behind. (Malformed files, through the binary: tests/cli/megatron_import_cli_test.cpp.)
#include <filesystem>
#include <sstream>

#include "catch.h"
#include "megatron_writer.h"
#include "mxablate/data/manifest.h"
#include "mxablate/data/megatron_import.h"
#include "mxablate/data/megatron_index.h"
#include "mxablate/data/sha256.h"
#include "process_util.h"
#include "test_support.h"

using namespace mxablate;
using namespace mxablate::data;
using test::MegatronDocument;
using test::TempDir;
namespace fs = std::filesystem;

namespace {

std::vector<int32_t> all_tokens(const TokenStream& s) {
  std::vector<int32_t> out(static_cast<size_t>(s.size()));
  s.read(0, out);
  return out;
}

struct Expected {
  std::vector<int32_t> train, validation;
  int64_t train_documents = 0, validation_documents = 0;
};

// The split computed independently: document k goes to validation iff the shared rule says so.
Expected expected_split(const std::vector<MegatronDocument>& docs, const MegatronImportOptions& o) {
  Expected e;
  for (size_t k = 0; k < docs.size(); ++k) {
    const bool val = is_validation_document(o.split_seed, static_cast<int64_t>(k), o.val_fraction);
    auto& out = val ? e.validation : e.train;
    ++(val ? e.validation_documents : e.train_documents);
    for (const auto& seq : docs[k])
      for (int64_t t : seq) out.push_back(static_cast<int32_t>(t));
  }
  return e;
}

Manifest import(const MegatronImportOptions& o) {
  std::ostringstream log;
  return import_megatron(o, log);
}

}  // namespace

TEST_CASE("Megatron import: uint16 and int32 datasets land token for token in their splits") {
  struct Case {
    int dtype;
    int64_t vocab;
    int bytes_per_token;
  };
  for (const Case c : {Case{8, 65536, 2}, Case{4, 70000, 4}, Case{4, 300, 2}}) {
    DYNAMIC_SECTION("dtype " << c.dtype << " vocabulary " << c.vocab) {
      TempDir dir("mxablate_megatron_import");
      const auto docs = test::random_documents(240, c.vocab, 7);
      const auto parts = test::megatron_parts(docs, c.dtype);
      test::write_megatron(dir / "c4_text_document", parts);

      MegatronImportOptions o;
      o.prefixes = {dir / "c4_text_document"};
      o.out_dir = dir / "prepared";
      o.vocab_size = c.vocab;
      o.val_fraction = 0.25;
      o.split_seed = 3;
      o.shard_tokens = 1024;  // several shards per split, documents spanning them
      const Manifest m = import(o);

      const Expected e = expected_split(docs, o);
      REQUIRE(e.validation_documents > 20);
      REQUIRE(e.train.size() > 2 * 1024);
      const TokenDataset ds = open_dataset(o.out_dir);
      CHECK(all_tokens(ds.train) == e.train);
      CHECK(all_tokens(ds.validation) == e.validation);
      CHECK(verify_dataset(o.out_dir) == "");

      // The manifest as written and as read back.
      for (const Manifest& mm : {m, ds.manifest}) {
        CHECK(mm.tokenizer.vocab_size == c.vocab);
        CHECK(mm.tokenizer.file.empty());
        CHECK(mm.tokenizer.type == "none");
        CHECK(mm.bytes_per_token == c.bytes_per_token);
        CHECK(mm.train.documents == e.train_documents);
        CHECK(mm.validation.documents == e.validation_documents);
        CHECK(mm.train.tokens == static_cast<int64_t>(e.train.size()));
        CHECK(mm.validation.tokens == static_cast<int64_t>(e.validation.size()));
        CHECK(mm.train.shards.size() > 1);
        REQUIRE(mm.sources.size() == 2);
        const std::string prefix = o.prefixes[0];
        CHECK(mm.sources[0].path == prefix + ".idx");
        CHECK(mm.sources[0].bytes == static_cast<int64_t>(parts.idx_bytes().size()));
        CHECK(mm.sources[0].sha256 == sha256_file(prefix + ".idx"));
        CHECK(mm.sources[1].path == prefix + ".bin");
        CHECK(mm.sources[1].bytes == static_cast<int64_t>(parts.bin.size()));
        CHECK(mm.sources[1].sha256 == sha256_file(prefix + ".bin"));
        CHECK(mm.sources[1].documents == 240);
        CHECK(mm.options["importer"] == "megatron");
        CHECK(mm.options["megatron_prefixes"] == nlohmann::json::array({prefix}));
        CHECK(mm.options["datasets"][0]["prefix"] == prefix);
        CHECK(mm.options["datasets"][0]["dtype"] == (c.dtype == 8 ? "uint16" : "int32"));
        CHECK(mm.options["datasets"][0]["documents"] == 240);
        CHECK(mm.options["datasets"][0]["sequence_modes"] == false);
        CHECK(mm.options["sequences"] == static_cast<int64_t>(parts.sequence_count));
        CHECK(mm.options["documents"] == 240);
        CHECK(mm.options["vocab_size"] == c.vocab);
        CHECK(mm.options["max_token_id"] == c.vocab - 1);
        CHECK(mm.options["val_fraction"] == 0.25);
        CHECK(mm.options["split_seed"] == 3);
        CHECK(mm.options["shard_tokens"] == 1024);
      }
      CHECK_FALSE(fs::exists(o.out_dir + ".partial"));

      // The same inputs give the same bytes (the split is a pure function of the seed).
      o.out_dir = dir / "again";
      const Manifest again = import(o);
      CHECK(again.train.shards.back().sha256 == m.train.shards.back().sha256);
      CHECK(again.validation.shards.front().sha256 == m.validation.shards.front().sha256);
    }
  }
}

TEST_CASE("Megatron import: every integer dtype is read with its width and sign") {
  for (const int code : {1, 2, 3, 5}) {
    DYNAMIC_SECTION("dtype code " << code) {
      TempDir dir("mxablate_megatron_dtypes");
      const int64_t vocab = code == 2 ? 128 : 250;  // int8 holds ids up to 127
      const auto docs = test::random_documents(120, vocab, static_cast<uint64_t>(code));
      test::write_megatron(dir / "d", test::megatron_parts(docs, code));
      MegatronImportOptions o;
      o.prefixes = {dir / "d.idx"};  // a trailing .idx is accepted
      o.out_dir = dir / "out";
      o.vocab_size = vocab;
      o.val_fraction = 0.2;
      import(o);
      const Expected e = expected_split(docs, o);
      const TokenDataset ds = open_dataset(o.out_dir);
      CHECK(all_tokens(ds.train) == e.train);
      CHECK(all_tokens(ds.validation) == e.validation);
      CHECK(ds.manifest.options["megatron_prefixes"][0] == dir / "d");
    }
  }
}

TEST_CASE("Megatron import: several datasets make one corpus, documents numbered in order") {
  TempDir dir("mxablate_megatron_several");
  const auto first = test::random_documents(150, 3000, 21);
  const auto second = test::random_documents(170, 3000, 22);
  test::write_megatron(dir / "en_6", test::megatron_parts(first, 8));
  test::write_megatron(dir / "en_7", test::megatron_parts(second, 4));  // another dtype
  MegatronImportOptions o;
  o.prefixes = {dir / "en_6", dir / "en_7"};
  o.out_dir = dir / "out";
  o.vocab_size = 3000;
  o.val_fraction = 0.2;
  const Manifest m = import(o);
  auto all = first;
  all.insert(all.end(), second.begin(), second.end());
  const Expected e = expected_split(all, o);
  const TokenDataset ds = open_dataset(o.out_dir);
  CHECK(all_tokens(ds.train) == e.train);
  CHECK(all_tokens(ds.validation) == e.validation);
  REQUIRE(m.sources.size() == 4);
  CHECK(m.sources[2].path == dir / "en_7.idx");
  CHECK(m.sources[3].sha256 == sha256_file(dir / "en_7.bin"));
  CHECK(m.options["documents"] == 320);
  CHECK(m.options["datasets"][1]["dtype"] == "int32");
  CHECK(m.options["datasets"][1]["documents"] == 170);
  CHECK(verify_dataset(o.out_dir) == "");

  o.prefixes = {dir / "en_6", dir / "en_7.bin", dir / "en_6.idx"};
  o.out_dir = dir / "twice";
  CHECK_THROWS_WITH(import(o), "--megatron: " + (dir / "en_6") +
                                   " is given twice (its documents would be imported twice)");
}

TEST_CASE("Megatron import: a multimodal index whose sequences are all text is imported") {
  TempDir dir("mxablate_megatron_modes");
  const auto docs = test::random_documents(80, 500, 11);
  auto parts = test::megatron_parts(docs, 8);
  parts.modes.assign(parts.sequence_count, 0);
  test::write_megatron(dir / "mm", parts);
  const MegatronIndexedDataset index(dir / "mm");
  CHECK(index.has_modes());
  CHECK(index.documents() == 80);
  MegatronImportOptions o;
  o.prefixes = {dir / "mm"};
  o.out_dir = dir / "out";
  o.vocab_size = 500;
  o.val_fraction = 0.3;
  const Manifest m = import(o);
  CHECK(m.options["datasets"][0]["sequence_modes"] == true);
  CHECK(all_tokens(open_dataset(o.out_dir).train) == expected_split(docs, o).train);
}

TEST_CASE("Megatron import: a given tokenizer file is copied and checksummed") {
  TempDir dir("mxablate_megatron_tokenizer");
  test::write_megatron(dir / "d", test::megatron_parts(test::random_documents(120, 900, 5), 8));
  test::write_file(dir / "llama.json", "{\"model\": {\"type\": \"BPE\"}}\n");
  MegatronImportOptions o;
  o.prefixes = {dir / "d"};
  o.out_dir = dir / "out";
  o.vocab_size = 900;
  o.tokenizer = dir / "llama.json";
  const Manifest m = import(o);
  CHECK(m.tokenizer.file == "tokenizer.json");
  CHECK(m.tokenizer.type == "external");
  CHECK(m.tokenizer.given_path == o.tokenizer);
  CHECK(m.tokenizer.sha256 == sha256_file(o.tokenizer));
  CHECK(m.tokenizer.vocab_size == 900);
  CHECK(verify_dataset(o.out_dir) == "");
  test::write_file(o.out_dir + "/tokenizer.json", "changed");
  CHECK(verify_dataset(o.out_dir) ==
        o.out_dir + "/tokenizer.json: checksum does not match the manifest");
}

TEST_CASE("Megatron import: a failure leaves nothing behind and an existing output untouched") {
  TempDir dir("mxablate_megatron_atomic");
  auto docs = test::random_documents(200, 1000, 9);
  docs.back().push_back({5, 1000});  // the very last id is outside the vocabulary
  test::write_megatron(dir / "d", test::megatron_parts(docs, 8));
  MegatronImportOptions o;
  o.prefixes = {dir / "d"};
  o.out_dir = dir / "out";
  o.vocab_size = 1000;
  REQUIRE_THROWS_AS(import(o), std::invalid_argument);
  CHECK_FALSE(fs::exists(o.out_dir));
  CHECK_FALSE(fs::exists(o.out_dir + ".partial"));

  fs::create_directories(o.out_dir);
  test::write_file(o.out_dir + "/keep", "x");
  o.vocab_size = 1001;
  REQUIRE_THROWS_WITH(import(o),
                      "--out: " + o.out_dir + " already exists; remove it or pass --force");
  o.force = true;
  o.out_dir = dir.path.string();  // would delete the sources
  REQUIRE_THROWS_WITH(import(o), "--out: " + dir.path.string() + " holds the source " +
                                     (dir / "d.idx") + ", which writing the output would delete");
  o.out_dir = dir.path.string() + "/";
  REQUIRE_THROWS_WITH(import(o), "--out: " + dir.path.string() + "/ holds the source " +
                                     (dir / "d.idx") + ", which writing the output would delete");
  CHECK(fs::exists(dir / "d.bin"));
  o.out_dir = dir / "d";  // named like the prefix, beside the sources: allowed
  import(o);
  CHECK(verify_dataset(o.out_dir) == "");
  o.out_dir = dir / "out";
  import(o);
  CHECK_FALSE(fs::exists(o.out_dir + "/keep"));
  CHECK(verify_dataset(o.out_dir) == "");
}

TEST_CASE("Megatron import: options are checked before any file is read") {
  MegatronImportOptions o;
  o.prefixes = {"/nonexistent/d"};
  o.out_dir = "/nonexistent/out";
  o.vocab_size = 0;
  CHECK_THROWS_WITH(import(o), "--vocab-size: must be in [1, 2^31], got 0");
  o.vocab_size = (int64_t{1} << 31) + 1;
  CHECK_THROWS_WITH(import(o), "--vocab-size: must be in [1, 2^31], got 2147483649");
  o.vocab_size = 10;
  o.val_fraction = 1;
  CHECK_THROWS_WITH(import(o), "--val-fraction: must be in (0, 1), got 1.000000");
  o.val_fraction = 0.1;
  o.shard_tokens = 10;
  CHECK_THROWS_WITH(import(o), "--shard-tokens: must be >= 1024, got 10");
  o.shard_tokens = 4096;
  CHECK_THROWS_WITH(import(o), "/nonexistent/d.idx: cannot open: No such file or directory");
}
