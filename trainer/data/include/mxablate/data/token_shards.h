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
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace mxablate::data {

inline constexpr int64_t kShardHeaderBytes = 32;

// Token data that cannot be trained on — a token outside the vocabulary, a shard that does not
// match its manifest: bad input (the trainer exits 2), never an internal failure. One line naming
// the file, the position and the value.
struct DataError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

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

  const std::string& path() const { return path_; }
  int64_t size() const { return count_; }
  int64_t vocab_size() const { return vocab_size_; }
  int bytes_per_token() const { return bytes_per_token_; }
  int32_t at(int64_t i) const;  // one token, checked like read()
  // Copies tokens [start, start + out.size()) into out. Every token is checked against the
  // vocabulary (a compare per token, next to the decoding): an id outside it is a DataError, so
  // no embedding is ever indexed with one.
  void read(int64_t start, std::span<int32_t> out) const;
  // The first position in [start, start + count) whose token is outside the vocabulary.
  std::optional<int64_t> find_out_of_vocabulary(int64_t start, int64_t count) const;
  std::string describe_token(int64_t i) const;  // "<path>: token <i> is <id>, outside …"

 private:
  uint32_t raw(int64_t i) const;
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
  const std::vector<std::unique_ptr<TokenShard>>& shards() const { return shards_; }

 private:
  std::vector<std::unique_ptr<TokenShard>> shards_;
  std::vector<int64_t> starts_;  // starts_[i] = first token of shard i; last = total
  int64_t vocab_size_ = 0;
};

}  // namespace mxablate::data
