// Writing a prepared data directory's splits: which split a document goes to, and the numbered
// token shards of one split. Shared by `data prepare` (text) and `data import` (Megatron-LM
// indexed datasets) so both produce the same layout from the same rule.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "mxablate/data/manifest.h"
#include "mxablate/data/token_shards.h"

namespace mxablate::data {

// The share of documents held out for validation unless the user says otherwise.
inline constexpr double kDefaultValFraction = 0.03;
inline constexpr uint64_t kDefaultSplitSeed = 1;
// Tokens per shard file at most, unless the user says otherwise.
inline constexpr int64_t kDefaultShardTokens = int64_t{1} << 27;

// Throws std::invalid_argument naming the option (--val-fraction, --shard-tokens) when a value
// is outside what the split rule and the shard writer accept.
void validate_split_options(double val_fraction, int64_t shard_tokens);

// Which split a document goes to: a pure function of (split_seed, document index).
bool is_validation_document(uint64_t split_seed, int64_t document_index, double val_fraction);

// Writes one split's tokens into DIR/NAME-00000.bin, NAME-00001.bin, … of at most shard_tokens
// tokens each. A document may span shards; documents are counted, not marked, in the shards.
class SplitWriter {
 public:
  SplitWriter(std::string dir, std::string name, int64_t vocab_size, int64_t shard_tokens);

  void begin_document() { ++info_.documents; }
  // Appends tokens to the current document (throws if one is outside the vocabulary).
  void append(std::span<const int32_t> tokens);
  void append_document(std::span<const int32_t> tokens) {
    begin_document();
    append(tokens);
  }
  // Closes the last shard and returns the split's counts, files and checksums. An empty split
  // still gets one (empty) shard.
  SplitInfo finish();

 private:
  void open_next();
  void close_current();

  std::string dir_, name_;
  int64_t vocab_size_, shard_tokens_;
  std::unique_ptr<TokenShardWriter> writer_;
  std::string current_file_;
  SplitInfo info_;
};

}  // namespace mxablate::data
