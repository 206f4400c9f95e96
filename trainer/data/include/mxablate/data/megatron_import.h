// `mxablate data import --megatron PREFIX`: a Megatron-LM indexed dataset (PREFIX.idx +
// PREFIX.bin, already tokenized) in, a prepared data directory out — the same shards, manifest
// and train/validation split rule as `data prepare`, so `data verify` and the trainer take it
// as they take prepared text.
//
// Documents are kept whole and in order; the tokens are copied as they are (Megatron's
// preprocessing already appended the end-of-document token when asked to). The vocabulary size
// must be given: the files do not store it, and the largest id seen is only a lower bound that
// would change the model's shape from one import to the next.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "mxablate/data/manifest.h"
#include "mxablate/data/split_writer.h"

namespace mxablate::data {

struct MegatronImportOptions {
  // PREFIX of PREFIX.idx / PREFIX.bin (a trailing .idx/.bin is dropped); several are imported
  // as one corpus, their documents numbered in the order given.
  std::vector<std::string> prefixes;
  std::string out_dir;
  int64_t vocab_size = 0;       // required: every token id must be in [0, vocab_size)
  std::string tokenizer;        // optional: a file copied into the directory and recorded
  double val_fraction = kDefaultValFraction;
  uint64_t split_seed = kDefaultSplitSeed;
  int64_t shard_tokens = kDefaultShardTokens;
  bool force = false;           // replace an existing out_dir
};

// Bad options and malformed or inconsistent files throw std::invalid_argument naming the file,
// the field and the value; nothing is left behind (the work happens in OUT_DIR.partial, renamed
// to OUT_DIR only when complete). Progress lines go to `log`.
Manifest import_megatron(const MegatronImportOptions& options, std::ostream& log);

// The PREFIX the files are read from: the given one, or with a trailing ".idx"/".bin" removed
// when PREFIX.idx does not exist but the stripped one's does.
std::string megatron_prefix(const std::string& given);

}  // namespace mxablate::data
