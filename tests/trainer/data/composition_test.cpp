// Per-source text bytes and tokens in manifest.json (written, read back, absent in older
// directories, refused when out of range) and the composition table made from them.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "catch.h"
#include "hostile_json.h"
#include "mxablate/data/manifest.h"
#include "test_support.h"

using namespace mxablate::data;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

Manifest small_manifest() {
  Manifest m;
  m.tokenizer.file = "tokenizer.model";
  m.tokenizer.sha256 = "ab";
  m.tokenizer.vocab_size = 32000;
  m.tokenizer.eos_id = 2;
  m.bytes_per_token = 2;
  m.train.documents = 1100;
  m.train.tokens = 240000;
  m.validation.documents = 103;
  m.validation.tokens = 10300;
  m.sources = {
      {"/data/large/text/linux.jsonl", 1234567, "s1", 1200, 1000000, 250000},
      {"gcide.jsonl", 999, "s2", 3, 900, 300},
      {"/x/default-texts.txt", 5, "s3", 0, 0, 0},
  };
  return m;
}

std::string error_of(const json& j) {
  try {
    manifest_from_json(j);
  } catch (const DataError& e) {
    return e.what();
  }
  return "accepted";
}

}  // namespace

TEST_CASE("manifest: per-source text bytes and tokens round-trip, absent is -1, below -1 is refused", "[data][composition]") {
  const Manifest m = small_manifest();
  const json j = to_json(m);
  CHECK(j.at("sources").at(0).at("text_bytes") == 1000000);
  CHECK(j.at("sources").at(0).at("tokens") == 250000);
  const Manifest back = manifest_from_json(j);
  REQUIRE(back.sources.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(back.sources[i].path == m.sources[i].path);
    CHECK(back.sources[i].text_bytes == m.sources[i].text_bytes);
    CHECK(back.sources[i].tokens == m.sources[i].tokens);
    CHECK(back.sources[i].documents == m.sources[i].documents);
  }
  CHECK(to_json(back) == j);

  // A directory prepared before the counts existed: -1, and the table says unknown.
  json old = j;
  for (auto& s : old["sources"]) {
    s.erase("text_bytes");
    s.erase("tokens");
  }
  const Manifest older = manifest_from_json(old);
  for (const auto& s : older.sources) {
    CHECK(s.text_bytes == -1);
    CHECK(s.tokens == -1);
  }
  CHECK_THAT(composition_table(older), has_text("| linux | 1,234,567 | unknown | 1,200 | unknown | | |\n"));
  json explicit_unknown = j;
  explicit_unknown["sources"][1]["tokens"] = -1;
  CHECK(manifest_from_json(explicit_unknown).sources[1].tokens == -1);

  for (const auto& [index, key, value, message] :
       std::vector<std::tuple<int, std::string, json, std::string>>{
           {0, "text_bytes", -2, "sources[0].text_bytes: must be >= -1, got -2"},
           {2, "tokens", INT64_MIN, "sources[2].tokens: must be >= -1, got -9223372036854775808"},
           {1, "tokens", "300", "sources[1].tokens: expected an integer, got \"300\""},
           {1, "text_bytes", 1.5, "sources[1].text_bytes: "},
           {0, "tokens", nullptr, "sources[0].tokens: expected an integer, got null"}}) {
    INFO(key << " = " << value.dump());
    json bad = j;
    bad["sources"][index][key] = value;
    const std::string e = error_of(bad);
    CHECK(e.rfind(message, 0) == 0);
    CHECK(mxablate::test::is_one_clean_line(e));
  }

  // Through the file: the file's path in front.
  const fs::path dir = fs::temp_directory_path() / ("mxablate_composition_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  json bad = j;
  bad["sources"][0]["text_bytes"] = -7;
  std::ofstream(dir / kManifestFile) << bad.dump();
  try {
    read_manifest(dir.string());
    FAIL("accepted text_bytes -7");
  } catch (const DataError& e) {
    CHECK(std::string(e.what()) ==
          (dir / kManifestFile).string() + ": sources[0].text_bytes: must be >= -1, got -7");
  }
  write_manifest(dir.string(), m);
  CHECK(read_manifest(dir.string()).sources[0].tokens == 250000);
  fs::remove_all(dir);
}

TEST_CASE("composition_table: the exact table for a small manifest", "[data][composition]") {
  CHECK(composition_table(small_manifest()) ==
        "| source | file bytes | text bytes | documents | tokens | share of tokens | text bytes per token |\n"
        "|---|---:|---:|---:|---:|---:|---:|\n"
        "| linux | 1,234,567 | 1,000,000 | 1,200 | 250,000 | 99.9 % | 4.00 |\n"
        "| gcide | 999 | 900 | 3 | 300 | 0.1 % | 3.00 |\n"
        "| default-texts | 5 | 0 | 0 | 0 | 0.0 % |  |\n"
        "| **total** | 1,235,571 | 1,000,900 | 1,203 | 250,300 | 100.0 % | 4.00 |\n"
        "\n"
        "Training split: 240,000 tokens in 1,100 documents; validation: 10,300 tokens in 103 "
        "documents; vocabulary 32,000.\n");
}

TEST_CASE("composition_table: one source not counted makes the shares and totals unknown", "[data][composition]") {
  Manifest m = small_manifest();
  m.sources.resize(1);
  m.sources.push_back({"old.jsonl.gz", 1000, "s", 100000, -1, -1});
  m.sources.push_back({"c4-train.00000-of-01024.json.gz", 1234567890123, "s", 7, 1, -1});
  CHECK(composition_table(m) ==
        "| source | file bytes | text bytes | documents | tokens | share of tokens | text bytes per token |\n"
        "|---|---:|---:|---:|---:|---:|---:|\n"
        "| linux | 1,234,567 | 1,000,000 | 1,200 | 250,000 |  | 4.00 |\n"
        "| old | 1,000 | unknown | 100,000 | unknown | | |\n"
        "| c4-train.00000-of-01024 | 1,234,567,890,123 | unknown | 7 | unknown | | |\n"
        "| **total** | 1,234,569,125,690 | unknown | 101,207 | unknown | | |\n"
        "\n"
        "Training split: 240,000 tokens in 1,100 documents; validation: 10,300 tokens in 103 "
        "documents; vocabulary 32,000.\n");
}

TEST_CASE("composition_table: a '|' or a line break in a source's name does not break the table", "[data][composition]") {
  Manifest m = small_manifest();
  m.sources[0].path = "/tmp/a|b/evil|na\nme\r.jsonl";
  m.sources[1].path = "/tmp/x\n| injected | 1 | 2 | 3 | 4 | 5 | 6 |\n.txt";
  const std::string table = composition_table(m);
  CHECK_THAT(table, has_text("\n| evil_na_me_ | 1,234,567 | 1,000,000 |"));
  // Header, rule, three sources, total, blank line, training line: eight lines.
  CHECK(std::count(table.begin(), table.end(), '\n') == 8);
  std::string::size_type start = 0;
  for (int row = 0; row < 6; ++row) {
    const auto end = table.find('\n', start);
    const std::string line = table.substr(start, end - start);
    INFO(line);
    CHECK(std::count(line.begin(), line.end(), '|') == 8);
    start = end + 1;
  }
}
