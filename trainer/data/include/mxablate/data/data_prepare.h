// `mxablate data prepare`: text in, a prepared data directory out (tokenizer, token shards for a
// train and a validation split, manifest.json). docs/design.md §4.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "mxablate/data/input_file.h"
#include "mxablate/data/manifest.h"
#include "mxablate/data/split_writer.h"  // is_validation_document

namespace mxablate::data {

struct DataPrepareOptions {
  std::vector<std::string> inputs;  // files and/or directories (see text_documents.h)
  std::string out_dir;
  std::string tokenizer_model;      // a SentencePiece model to use; empty: train a BPE one
  int64_t vocab_size = 4096;        // for a trained tokenizer
  double character_coverage = 0.9999;
  bool byte_fallback = false;       // unknown characters become UTF-8 byte tokens, not <unk>
  // Text as it is (source code): no Unicode normalization, runs of spaces, tabs and line breaks
  // kept and learnable as pieces. Off: SentencePiece's default (NFKC, whitespace collapsed),
  // right for prose. Applies to a trained tokenizer; a given one brings its own.
  bool keep_whitespace = false;
  int64_t tokenizer_max_sentences = 2000000;  // sampled for training (bounds memory on big data)
  uint64_t tokenizer_seed = 1;
  double val_fraction = kDefaultValFraction;  // of the documents, by a keyed hash of the index
  uint64_t split_seed = kDefaultSplitSeed;
  int64_t shard_tokens = kDefaultShardTokens;  // tokens per shard file at most
  TextLimits limits;                // a line's and a document's bytes (input_file.h)
  int threads = 0;                  // 0: all cores
  bool force = false;               // replace an existing out_dir
};

// Validates the options (std::invalid_argument naming the option), then runs. Writes into
// OUT_DIR.partial and renames it to OUT_DIR only when complete, with the composition table
// (manifest.h) beside the manifest; any error removes OUT_DIR.partial (output_dir.h). Bad input
// (an unreadable or damaged file, a malformed line, a line over the limit) is
// std::invalid_argument naming the file. Progress lines go to `log`.
Manifest prepare_data(const DataPrepareOptions& options, std::ostream& log);

}  // namespace mxablate::data
