// Token shards: the binary files `mxablate data prepare` writes and the trainer memory-maps.
//
// File layout (little-endian):
//   bytes 0..7   magic "MXTOKEN1"
//   bytes 8..11  uint32 bytes per token (2 when the vocabulary fits 16 bits, else 4)
//   bytes 12..15 uint32 reserved (0)
//   bytes 16..23 uint64 token count
//   bytes 24..31 uint64 vocabulary size
//   bytes 32..   the tokens
// The count is written when the writer closes, so a shard cut short by a crash is detected by
// its size and rejected instead of being read as data.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace mxablate::data {

inline constexpr int64_t kShardHeaderBytes = 32;

class TokenShardWriter {
 public:
  TokenShardWriter(const std::string& path, int64_t vocab_size);
  ~TokenShardWriter();
  TokenShardWriter(const TokenShardWriter&) = delete;
  TokenShardWriter& operator=(const TokenShardWriter&) = delete;

  void append(std::span<const int32_t> tokens);  // throws if a token is outside the vocabulary
  // Writes the count, flushes and fsyncs. Called by the destructor if not called before (errors
  // are then swallowed: call it explicitly to see them).
  void close();
  int64_t tokens() const { return count_; }
  int bytes_per_token() const { return bytes_per_token_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  int64_t vocab_size_;
  int bytes_per_token_;
  int64_t count_ = 0;
};

// A read-only memory-mapped shard.
class TokenShard {
 public:
  explicit TokenShard(const std::string& path);  // throws naming the file if it is malformed
  ~TokenShard();
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;

  int64_t size() const { return count_; }
  int64_t vocab_size() const { return vocab_size_; }
  int32_t at(int64_t i) const;
  // Copies tokens [start, start + out.size()) into out.
  void read(int64_t start, std::span<int32_t> out) const;

 private:
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const uint8_t* tokens_ = nullptr;
  int bytes_per_token_ = 2;
  int64_t count_ = 0;
  int64_t vocab_size_ = 0;
};

// Several shards read as one stream of tokens, in the order given.
class TokenStream {
 public:
  TokenStream() = default;
  explicit TokenStream(const std::vector<std::string>& shard_paths);
  int64_t size() const { return starts_.empty() ? 0 : starts_.back(); }
  // Copies tokens [start, start + out.size()), which may span shard boundaries.
  void read(int64_t start, std::span<int32_t> out) const;
  int64_t vocab_size() const { return vocab_size_; }

 private:
  std::vector<std::unique_ptr<TokenShard>> shards_;
  std::vector<int64_t> starts_;  // starts_[i] = first token of shard i; last = total
  int64_t vocab_size_ = 0;
};

}  // namespace mxablate::data
