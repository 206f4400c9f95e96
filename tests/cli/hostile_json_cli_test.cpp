// `mxablate data verify` through the binary on a prepared directory whose manifest.json holds a
// hostile value: each is one line naming the file and key (or byte), exit 2 — never the JSON
// library's exception text or exit 1 (docs/design.md §10).
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "catch.h"
#include "hostile_json.h"
#include "megatron_writer.h"
#include "process_util.h"

using namespace mxablate;
using test::run_command;
using test::TempDir;
namespace fs = std::filesystem;

namespace {

const std::string kBin = MXABLATE_BIN;

}  // namespace

TEST_CASE("mxablate data verify: a hostile number in manifest.json is one line naming file and key, exit 2") {
  TempDir dir("mxablate_hostile_manifest_cli");
  test::write_megatron(dir / "c4", test::megatron_parts(test::random_documents(40, 100, 1), 8));
  const std::string data = dir / "data";
  const auto imported = run_command(kBin + " data import --megatron '" + (dir / "c4") + "' --out '" +
                                    data + "' --vocab-size 100 --val-fraction 0.2");
  INFO(imported.output);
  REQUIRE(imported.exit_code == 0);
  const std::string manifest = data + "/manifest.json";
  const nlohmann::json good = [&] {
    std::ifstream in(manifest);
    return nlohmann::json::parse(in);
  }();
  const auto verify = [&] { return run_command(kBin + " data verify '" + data + "'"); };
  REQUIRE(verify().exit_code == 0);

  struct Key {
    std::string pointer;
    std::string path;
  };
  for (const Key& key : {Key{"/tokenizer/vocab_size", "tokenizer.vocab_size"},
                         Key{"/splits/train/shards/0/tokens", "splits.train.shards[0].tokens"},
                         Key{"/bytes_per_token", "bytes_per_token"}})
    for (const auto& v : test::hostile_integer_values()) {
      INFO(key.path << " = " << v.name);
      std::ofstream(manifest, std::ios::trunc) << test::with_hostile_value(good, key.pointer, v);
      const auto r = verify();
      INFO(r.output);
      CHECK(r.exit_code == 2);
      CHECK(test::is_one_clean_line(r.output));
      CHECK(r.output.rfind("mxablate: " + manifest + ": " + key.path + ": " + v.message, 0) == 0);
    }

  // Where the parser fails before any key: the byte.
  std::ofstream(manifest, std::ios::trunc) << "";
  auto r = verify();
  CHECK(r.exit_code == 2);
  CHECK(r.output == "mxablate: " + manifest +
                        ": not valid JSON at byte 1 (unexpected end of input; expected '[', '{', "
                        "or a literal)\n");
  // Nesting beyond 64 levels is refused while parsing, never a deep recursion.
  std::ofstream(manifest, std::ios::trunc) << std::string(100000, '[') << std::string(100000, ']');
  r = verify();
  CHECK(r.exit_code == 2);
  CHECK(test::is_one_clean_line(r.output));
  CHECK(r.output.find(": nested deeper than 64 levels\n") != std::string::npos);
}
