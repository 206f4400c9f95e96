// `mxablate data import --megatron` through the binary: a good dataset imports and verifies;
// every malformed or inconsistent index, data file or option is one exact line and exit 2, with
// no output directory left behind.
#include <filesystem>
#include <functional>

#include "catch.h"
#include "megatron_writer.h"
#include "process_util.h"

using namespace mxablate;
using test::MegatronParts;
using test::run_command;
using test::TempDir;
namespace fs = std::filesystem;

namespace {

const std::string kBin = MXABLATE_BIN;

test::CommandResult import(const std::string& prefix, const std::string& out,
                           const std::string& extra = "--vocab-size 100") {
  return run_command(kBin + " data import --megatron '" + prefix + "' --out '" + out + "' " +
                     extra);
}

// Four documents (the third empty) in four sequences: lengths 3 2 1 4, pointers 0 6 10 12,
// document indices 0 2 3 3 4; 122 bytes of index, 20 of uint16 tokens.
MegatronParts small_parts(int dtype = 8) {
  return test::megatron_parts({{{1, 2, 3}, {4, 5}}, {{6}}, {}, {{7, 8, 9, 10}}}, dtype);
}

}  // namespace

TEST_CASE("mxablate data import --megatron: a good dataset imports, verifies and reports") {
  TempDir dir("mxablate_megatron_cli_ok");
  const auto docs = test::random_documents(300, 32000, 1);
  test::write_megatron(dir / "c4", test::megatron_parts(docs, 8));
  const auto r = import(dir / "c4", dir / "data", "--vocab-size 32000 --val-fraction 0.1");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("data import: largest token id 31999 (vocabulary 32000 from --vocab-size)") !=
        std::string::npos);
  CHECK(r.output.find("data import: " + (dir / "c4") + ".{idx,bin}: 300 documents, ") !=
        std::string::npos);
  const auto v = run_command(kBin + " data verify '" + (dir / "data") + "'");
  INFO(v.output);
  CHECK(v.exit_code == 0);
  CHECK(v.output.rfind(dir / "data" + ": ok: vocabulary 32000, ", 0) == 0);
  CHECK(v.output.find(", 2 sources") != std::string::npos);

  // A second import into the same place needs --force.
  const auto again = import(dir / "c4", dir / "data", "--vocab-size 32000");
  CHECK(again.exit_code == 2);
  CHECK(again.output == "mxablate: --out: " + (dir / "data") +
                            " already exists; remove it or pass --force\n");
}

TEST_CASE("mxablate data import --megatron: malformed input is one exact line and exit 2") {
  TempDir dir("mxablate_megatron_cli_bad");
  const std::string p = dir / "bad";
  struct Variant {
    std::string name;
    std::function<void(MegatronParts&)> mutate;
    std::string message;  // after "mxablate: "
    std::string extra = "--vocab-size 100";
    int dtype = 8;
    std::string progress = "";  // stdout before the error (the dataset was read to the end)
  };
  const std::vector<Variant> variants = {
      {"bad magic", [](MegatronParts& m) { m.magic[6] = 'Y'; },
       p + ".idx: magic: expected \"MMIDIDX\\x00\\x00\" (a Megatron-LM indexed dataset index), "
           "found \"MMIDIDY\\x00\\x00\""},
      {"bad version", [](MegatronParts& m) { m.version = 2; },
       p + ".idx: version: 2 is not supported (expected 1)"},
      {"unknown dtype", [](MegatronParts& m) { m.dtype = 9; },
       p + ".idx: dtype: code 9 is not a Megatron-LM dtype (codes 1-8)"},
      {"float dtype", [](MegatronParts& m) { m.dtype = 7; },
       p + ".idx: dtype: float32 (code 7) cannot hold token ids; expected an integer dtype "
           "(Megatron-LM writes uint16 or int32)"},
      {"sequence count larger than the file",
       [](MegatronParts& m) { m.sequence_count = 1ull << 40; },
       p + ".idx: sequence_count: 1099511627776 sequences need 12 bytes each (length and pointer) "
           "but only 88 bytes follow the header (truncated, or not this index)"},
      {"document count larger than the file",
       [](MegatronParts& m) { m.document_count = 1ull << 62; },
       p + ".idx: document_count: 4611686018427387904 document indices need 8 bytes each but only "
           "40 bytes follow the sequence arrays (truncated)"},
      {"no document indices", [](MegatronParts& m) { m.document_count = 0; },
       p + ".idx: document_count: 0, but the document indices always hold at least the leading 0"},
      {"trailing bytes", [](MegatronParts& m) { m.modes = {0, 0}; },
       p + ".idx: size: 2 bytes follow the document indices; expected 0, or 4 (one mode byte per "
           "sequence in a multimodal index)"},
      {"negative length", [](MegatronParts& m) { m.lengths[0] = -1; },
       p + ".idx: sequence_lengths[0] = -1 is negative"},
      {"pointer past the .bin end", [](MegatronParts& m) { m.pointers[2] = 1ll << 40; },
       p + ".idx: sequence_pointers[2] = 1099511627776 with sequence_lengths[2] = 1 (uint16) "
           "reaches past the end of " + p + ".bin (20 bytes)"},
      {".bin truncated", [](MegatronParts& m) { m.bin.resize(18); },
       p + ".idx: sequence_pointers[3] = 12 with sequence_lengths[3] = 4 (uint16) reaches past "
           "the end of " + p + ".bin (18 bytes)"},
      {".bin longer than the index says", [](MegatronParts& m) { m.bin += "xx"; },
       p + ".bin: size: 22 bytes, but the index's sequences cover 20 (not the data of this "
           "index?)"},
      {"sizes and pointers disagree", [](MegatronParts& m) { m.lengths[1] = 3; },
       p + ".idx: sequence_pointers[2] = 10 but the previous sequence ends at byte 12 (pointers "
           "and lengths disagree)"},
      {"first document index not 0", [](MegatronParts& m) { m.document_indices[0] = 1; },
       p + ".idx: document_indices[0] = 1 (expected 0)"},
      {"document indices not monotone", [](MegatronParts& m) { m.document_indices[2] = 1; },
       p + ".idx: document_indices[2] = 1 is less than document_indices[1] = 2 (not monotone)"},
      {"document index past the sequences", [](MegatronParts& m) { m.document_indices[3] = 9; },
       p + ".idx: document_indices[3] = 9 is past the sequence count 4"},
      {"sequences after the last document", [](MegatronParts& m) { m.document_indices[4] = 3; },
       p + ".idx: document_indices[4] = 3 but the index has 4 sequences (the last ones would "
           "belong to no document)"},
      {"a non-text sequence mode", [](MegatronParts& m) { m.modes = {0, 0, 1, 0}; },
       p + ".idx: sequence_modes[2] = 1: not a text sequence (multimodal data cannot be imported "
           "as tokens)"},
      {"token id out of range for --vocab-size", [](MegatronParts&) {},
       p + ".bin: token id 10 at byte 18 (document 3, sequence 3) is outside the vocabulary [0, "
           "10) of --vocab-size",
       "--vocab-size 10"},
      {"negative token id",  // int32 tokens: the second one becomes -1
       [](MegatronParts& m) { m.bin[4] = m.bin[5] = m.bin[6] = m.bin[7] = '\xff'; },
       p + ".bin: token id -1 at byte 4 (document 0, sequence 0) is outside the vocabulary [0, "
           "100) of --vocab-size",
       "--vocab-size 100", 4},
      {"too few documents for a validation split", [](MegatronParts&) {},
       p + ": no tokens fell into the validation split (4 documents); raise --val-fraction",
       "--vocab-size 100", 8,
       "data import: " + p + ".{idx,bin}: 4 documents, 4 sequences, 20 bytes of uint16 ids, "
                             "largest 10\n"},
      {"bad --vocab-size", [](MegatronParts&) {}, "--vocab-size: must be in [1, 2^31], got -3",
       "--vocab-size -3"},
      {"missing --vocab-size", [](MegatronParts&) {}, "--vocab-size is required (see --help)", ""},
  };
  for (const Variant& v : variants) {
    DYNAMIC_SECTION(v.name) {
      MegatronParts parts = small_parts(v.dtype);
      v.mutate(parts);
      test::write_megatron(p, parts);
      const auto r = import(p, dir / "out", v.extra);
      CHECK(r.output == v.progress + "mxablate: " + v.message + "\n");
      CHECK(r.exit_code == 2);
      CHECK_FALSE(fs::exists(dir / "out"));
      CHECK_FALSE(fs::exists(dir / "out.partial"));
    }
  }
}

TEST_CASE("mxablate data import --megatron: a truncated index or missing files are named") {
  TempDir dir("mxablate_megatron_cli_trunc");
  const std::string p = dir / "t";
  const MegatronParts parts = small_parts();
  test::write_megatron(p, parts);
  const std::string idx = parts.idx_bytes();
  // Cut anywhere inside the arrays: the counts no longer fit the file.
  for (const size_t cut : {size_t{1}, size_t{3}, size_t{40}, size_t{80}}) {
    test::write_file(p + ".idx", idx.substr(0, idx.size() - cut));
    const auto r = import(p, dir / "out");
    CHECK(r.exit_code == 2);
    CHECK(r.output.rfind("mxablate: " + p + ".idx: ", 0) == 0);
    CHECK(r.output.find("(truncated") != std::string::npos);
  }
  test::write_file(p + ".idx", idx.substr(0, 20));
  CHECK(import(p, dir / "out").output ==
        "mxablate: " + p + ".idx: header: the file has 20 bytes; the header alone needs 34 "
                           "(truncated)\n");
  test::write_file(p + ".idx", idx.substr(0, 5));  // too short even for the magic: still named
  CHECK(import(p, dir / "out").output ==
        "mxablate: " + p + ".idx: header: the file has 5 bytes; the header alone needs 34 "
                           "(truncated)\n");
  test::write_file(p + ".idx", idx.substr(0, idx.size() - 3));
  CHECK(import(p, dir / "out").output ==
        "mxablate: " + p + ".idx: document_count: 5 document indices need 8 bytes each but only "
                           "37 bytes follow the sequence arrays (truncated)\n");
  fs::remove(p + ".bin");
  test::write_file(p + ".idx", idx);
  auto r = import(p, dir / "out");
  CHECK(r.output == "mxablate: " + p + ".bin: cannot open: No such file or directory\n");
  CHECK(r.exit_code == 2);
  r = import(dir / "nothing", dir / "out");
  CHECK(r.output ==
        "mxablate: " + (dir / "nothing") + ".idx: cannot open: No such file or directory\n");
  CHECK(r.exit_code == 2);
}
