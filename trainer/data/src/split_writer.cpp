#include "mxablate/data/split_writer.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "mxablate/data/sequence_sampler.h"
#include "mxablate/data/sha256.h"

namespace mxablate::data {

namespace fs = std::filesystem;

void validate_split_options(double val_fraction, int64_t shard_tokens) {
  if (!(val_fraction > 0 && val_fraction < 1))
    throw std::invalid_argument("--val-fraction: must be in (0, 1), got " +
                                std::to_string(val_fraction));
  if (shard_tokens < 1024)
    throw std::invalid_argument("--shard-tokens: must be >= 1024, got " +
                                std::to_string(shard_tokens));
}

bool is_validation_document(uint64_t split_seed, int64_t document_index, double val_fraction) {
  const uint64_t h = splitmix64(splitmix64(split_seed) ^ static_cast<uint64_t>(document_index));
  // 53 random bits as a uniform number in [0, 1).
  const double u = static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);
  return u < val_fraction;
}

SplitWriter::SplitWriter(std::string dir, std::string name, int64_t vocab_size,
                         int64_t shard_tokens)
    : dir_(std::move(dir)), name_(std::move(name)), vocab_size_(vocab_size),
      shard_tokens_(shard_tokens) {}

void SplitWriter::append(std::span<const int32_t> tokens) {
  size_t pos = 0;
  while (pos < tokens.size()) {
    if (!writer_ || writer_->tokens() == shard_tokens_) open_next();
    const size_t take =
        std::min(tokens.size() - pos, static_cast<size_t>(shard_tokens_ - writer_->tokens()));
    writer_->append(tokens.subspan(pos, take));
    pos += take;
    info_.tokens += static_cast<int64_t>(take);
  }
}

SplitInfo SplitWriter::finish() {
  close_current();
  if (info_.shards.empty()) open_next(), close_current();
  return info_;
}

void SplitWriter::open_next() {
  close_current();
  char name[64];
  std::snprintf(name, sizeof name, "%s-%05zu.bin", name_.c_str(), info_.shards.size());
  current_file_ = name;
  writer_ = std::make_unique<TokenShardWriter>((fs::path(dir_) / current_file_).string(),
                                               vocab_size_);
}

void SplitWriter::close_current() {
  if (!writer_) return;
  writer_->close();
  const std::string path = (fs::path(dir_) / current_file_).string();
  info_.shards.push_back({current_file_, writer_->tokens(), sha256_file(path)});
  writer_.reset();
}

}  // namespace mxablate::data
