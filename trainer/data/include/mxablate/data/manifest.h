// DATA_DIR/manifest.json: what a prepared data directory holds (tokenizer, vocabulary, token
// counts, shards, and checksums of the sources it was made from), and the dataset the trainer
// opens from it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mxablate/data/token_shards.h"

namespace mxablate::data {

inline constexpr int kManifestVersion = 1;
inline constexpr const char* kManifestFile = "manifest.json";

struct ShardInfo {
  std::string file;  // relative to the data directory
  int64_t tokens = 0;
  std::string sha256;
};

struct SplitInfo {
  int64_t documents = 0;
  int64_t tokens = 0;
  std::vector<ShardInfo> shards;
};

struct SourceInfo {
  std::string path;  // as given on the command line (or found under a given directory)
  int64_t bytes = 0;
  std::string sha256;
  int64_t documents = 0;
  // Counted while encoding (both splits; tokens include each document's end-of-document token).
  // -1: not recorded (a directory prepared before sources counted them).
  int64_t text_bytes = -1;  // the documents' UTF-8 text, without the file's JSON or separators
  int64_t tokens = -1;
};

// An input that a walked directory held but that could not be read (input_file.h): listed, so
// the composition says what the directory held beyond what was prepared.
struct SkippedInput {
  std::string path;
  std::string reason;  // input_problem_name: unreadable, special
};

struct TokenizerInfo {
  std::string file;                // relative to the data directory (a copy of the model);
                                   // empty: none (imported ids, see megatron_import.h)
  std::string type = "sentencepiece";  // or "external"/"none" for imported data
  std::string model_type;          // bpe | unigram | … (as the model says)
  bool trained_here = false;       // false: a given model was used
  std::string given_path;          // where a given model came from
  std::string sha256;
  int64_t vocab_size = 0;
  int64_t unk_id = -1, bos_id = -1, eos_id = -1;
};

struct Manifest {
  int version = kManifestVersion;
  TokenizerInfo tokenizer;
  int bytes_per_token = 2;
  SplitInfo train;
  SplitInfo validation;
  std::vector<SourceInfo> sources;
  std::vector<SkippedInput> skipped;  // absent in directories prepared before it was recorded
  nlohmann::json options = nlohmann::json::object();  // the prepare options, for provenance
};

nlohmann::json to_json(const Manifest& m);
// Strict: a missing key, a wrong type, a number that does not fit its field or a string that is
// not UTF-8 is a DataError naming the key path ("splits.train.shards[0].tokens: …").
Manifest manifest_from_json(const nlohmann::json& j);

// The composition of a prepared directory, one row per source (its file name without the
// .jsonl/.json/.txt extension and directory): file bytes, text bytes, documents, tokens, share of
// the tokens, text bytes per token, and a total row. A Markdown table: `data prepare` writes it beside the manifest as
// composition.md, `data verify` prints it, and the docs quote it.
std::string composition_table(const Manifest& m);
inline constexpr const char* kCompositionFile = "composition.md";

// Any problem, the JSON itself included (contract/json_file.h), is one line DataError naming
// DATA_DIR/manifest.json and the key or byte.
Manifest read_manifest(const std::string& data_dir);
void write_manifest(const std::string& data_dir, const Manifest& m);

// A prepared data directory opened for reading: both splits memory-mapped.
struct TokenDataset {
  std::string dir;
  Manifest manifest;
  TokenStream train;
  TokenStream validation;
};

// Opens DATA_DIR with the checks that cost next to nothing: the manifest's numbers, each shard's
// length, token width and vocabulary against the manifest, and the first and last 64 Ki tokens
// of each shard inside the vocabulary (DataError, naming the file, otherwise). Checksums are not
// recomputed: verify_dataset does that.
TokenDataset open_dataset(const std::string& data_dir);
// Everything: the manifest's numbers, every shard's and the tokenizer's SHA-256, every token
// inside the vocabulary. Returns "" when all is well, otherwise the first problem (one line).
std::string verify_dataset(const std::string& data_dir);

}  // namespace mxablate::data
