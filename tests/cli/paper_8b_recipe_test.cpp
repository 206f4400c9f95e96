// recipes/paper-8b-c4.yaml plans on what `mxablate data import --megatron` makes of Megatron-LM
// files tokenized at Llama 3's 128,256-token vocabulary (the MLPerf C4 files, here a tiny
// hand-built stand-in): the llama-8b preset takes the data's vocabulary, the 21 runs of 8 ranks
// plan. The recipe is planned as shipped except for two values: data.dataset (the stand-in's
// directory) and eval.tokens — the recipe's 1,024 sequences of 8,192 tokens would need a
// validation split of 8.4 M tokens, so the copy evaluates on one sequence; the shipped value is
// refused on the stand-in at eval.tokens, and only there.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "catch.h"
#include "megatron_writer.h"
#include "process_util.h"

using namespace mxablate;
using test::MegatronDocument;
using test::run_command;
using test::TempDir;
namespace fs = std::filesystem;

namespace {

const std::string kBin = MXABLATE_BIN;
const fs::path kRecipe = fs::path(RECIPES_DIR) / "paper-8b-c4.yaml";
constexpr int64_t kVocab = 128256;

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void replace_once(std::string& text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  REQUIRE(text.find(from, at + 1) == std::string::npos);
  text.replace(at, from.size(), to);
}

// 80 documents of one 1,000-token sequence, ids spread over the whole vocabulary (the last id
// included), stored as int32 (Megatron-LM's dtype above 65,500 ids).
std::vector<MegatronDocument> documents() {
  std::vector<MegatronDocument> docs(80);
  uint64_t s = 88172645463325252ull;
  for (auto& doc : docs) {
    doc.emplace_back(1000);
    for (int64_t& t : doc[0]) {
      s ^= s << 13, s ^= s >> 7, s ^= s << 17;
      t = static_cast<int64_t>(s % kVocab);
    }
  }
  docs[0][0][0] = kVocab - 1;
  return docs;
}

}  // namespace

TEST_CASE("recipes/paper-8b-c4.yaml plans on Megatron data imported at Llama 3's vocabulary") {
  TempDir dir("mxablate_paper_8b");
  test::write_megatron(dir / "c4-train.en_6_text_document", test::megatron_parts(documents(), 4));
  // 30 % held out: both splits then hold a few 8,192-token sequences.
  const auto imported = run_command(kBin + " data import --megatron '" + (dir / "c4-train.en_6_text_document") +
                                    "' --out '" + (dir / "c4-llama3") + "' --vocab-size 128256 --val-fraction 0.3");
  INFO(imported.output);
  REQUIRE(imported.exit_code == 0);
  CHECK(imported.output.find("largest token id 128255 (vocabulary 128256") != std::string::npos);

  std::string recipe = read_text(kRecipe);
  replace_once(recipe, "dataset: data/c4-llama3", "dataset: " + (dir / "c4-llama3"));
  const std::string as_shipped = dir / "as-shipped.yaml";
  test::write_file(as_shipped, recipe);
  const auto refused = run_command(kBin + " plan '" + as_shipped + "'");
  INFO(refused.output);
  CHECK(refused.exit_code == 2);
  CHECK(refused.output.find("eval.tokens: 8.38861e+06 tokens (1024 sequences of 8192) are more than the "
                            "validation split") != std::string::npos);

  replace_once(recipe, "tokens: 8388608}", "tokens: 8192}");
  const std::string scaled = dir / "paper-8b-c4.yaml";
  test::write_file(scaled, recipe);
  const auto planned = run_command(kBin + " plan '" + scaled + "'");
  INFO(planned.output);
  REQUIRE(planned.exit_code == 0);
  CHECK(planned.output.find("target: validation loss 3.3") != std::string::npos);
  // 7 arms × 3 seeds of 8 ranks each; the model at the data's vocabulary: Llama 3.1 8B's count.
  CHECK(planned.output.find("21 runs (7 arms") != std::string::npos);
  const auto json = run_command(kBin + " plan --json '" + scaled + "'");
  INFO(json.output);
  REQUIRE(json.exit_code == 0);
  CHECK(json.output.find("8030261248") != std::string::npos);
  for (const char* arm : {"fp8", "FDW+SR", "FDW+RHT16", "FDW+H16"}) {
    INFO(arm);
    CHECK(planned.output.find(arm) != std::string::npos);
  }
  // What it costs: no rate is measured at the recipe's 8 ranks (docs/performance.md, "Rates the
  // plan uses", has 4 at most), so no run gets a figure, and each is told why.
  for (const char* gpu : {"h100", "h200"}) {
    const auto cost = run_command(kBin + " plan '" + scaled + "' --gpu " + gpu);
    INFO(cost.output);
    REQUIRE(cost.exit_code == 0);
    CHECK(cost.output.find(std::string("21 runs have no measured rate for ") + gpu + ", so no figure:\n") !=
          std::string::npos);
    CHECK(cost.output.find(std::string("  #1–#3, #10–#12, #19–#21 (fp8, FDW, FDW+H16 at llama-8b): no row of "
                                       "llama-8b on ") + gpu + " at seq 8192 on 8 ranks (measured: 4 ranks") !=
          std::string::npos);
    CHECK(cost.output.find("  #4–#9, #13–#18 (F, FD, FDW+SR, FDW+RHT16 at llama-8b): its numerics are none of the "
                           "measured arms") != std::string::npos);
  }
}
