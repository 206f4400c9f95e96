#include "mxablate/data/token_shards.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace mxablate::data {
namespace {

constexpr char kMagic[8] = {'M', 'X', 'T', 'O', 'K', 'E', 'N', '1'};

std::string errno_text() { return std::strerror(errno); }

void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{p[i]} << (8 * i);
  return v;
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

}  // namespace

TokenShardWriter::TokenShardWriter(const std::string& path, int64_t vocab_size)
    : path_(path), vocab_size_(vocab_size), bytes_per_token_(vocab_size <= 65536 ? 2 : 4) {
  if (vocab_size <= 0) throw std::invalid_argument(path + ": vocabulary size must be > 0");
  file_ = std::fopen(path.c_str(), "wb");
  if (!file_) throw std::runtime_error(path + ": cannot create the shard: " + errno_text());
  uint8_t header[kShardHeaderBytes] = {};
  std::memcpy(header, kMagic, 8);
  put_u32(header + 8, static_cast<uint32_t>(bytes_per_token_));
  put_u64(header + 24, static_cast<uint64_t>(vocab_size));
  if (std::fwrite(header, 1, sizeof header, file_) != sizeof header)
    throw std::runtime_error(path + ": cannot write the shard header: " + errno_text());
}

TokenShardWriter::~TokenShardWriter() {
  try {
    close();
  } catch (...) {
  }
}

void TokenShardWriter::append(std::span<const int32_t> tokens) {
  std::vector<uint8_t> bytes(tokens.size() * static_cast<size_t>(bytes_per_token_));
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t t = tokens[i];
    if (t < 0 || t >= vocab_size_)
      throw std::invalid_argument(path_ + ": token " + std::to_string(t) +
                                  " outside the vocabulary of " + std::to_string(vocab_size_));
    for (int b = 0; b < bytes_per_token_; ++b)
      bytes[i * bytes_per_token_ + b] = static_cast<uint8_t>(static_cast<uint32_t>(t) >> (8 * b));
  }
  if (std::fwrite(bytes.data(), 1, bytes.size(), file_) != bytes.size())
    throw std::runtime_error(path_ + ": cannot write tokens: " + errno_text());
  count_ += static_cast<int64_t>(tokens.size());
}

void TokenShardWriter::close() {
  if (!file_) return;
  std::FILE* f = file_;
  file_ = nullptr;
  uint8_t count[8];
  put_u64(count, static_cast<uint64_t>(count_));
  const bool ok = std::fseek(f, 16, SEEK_SET) == 0 && std::fwrite(count, 1, 8, f) == 8 &&
                  std::fflush(f) == 0 && ::fsync(fileno(f)) == 0;
  const std::string why = errno_text();
  std::fclose(f);
  if (!ok) throw std::runtime_error(path_ + ": cannot finish the shard: " + why);
}

TokenShard::TokenShard(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw std::runtime_error(path + ": cannot open the token shard: " + errno_text());
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size < kShardHeaderBytes) {
    ::close(fd);
    throw DataError(path + ": not a token shard (too short)");
  }
  map_bytes_ = static_cast<size_t>(st.st_size);
  map_ = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw std::runtime_error(path + ": cannot memory-map the token shard: " + errno_text());
  }
  const auto* bytes = static_cast<const uint8_t*>(map_);
  const auto fail = [&](const std::string& why) {
    ::munmap(map_, map_bytes_);
    map_ = nullptr;
    throw DataError(path + ": " + why);
  };
  if (std::memcmp(bytes, kMagic, 8) != 0) fail("not a token shard (bad magic)");
  bytes_per_token_ = static_cast<int>(get_u32(bytes + 8));
  if (bytes_per_token_ != 2 && bytes_per_token_ != 4)
    fail("unsupported token width " + std::to_string(bytes_per_token_));
  const uint64_t count = get_u64(bytes + 16);
  const uint64_t vocab = get_u64(bytes + 24);
  // Token ids are int32 in the trainer; a count beyond the file's size is caught below.
  if (vocab == 0 || vocab > 0x7fffffffu)
    fail("vocabulary size " + std::to_string(vocab) + " in the header is out of range");
  if (count > (map_bytes_ - kShardHeaderBytes) / static_cast<uint64_t>(bytes_per_token_) + 1)
    fail("size " + std::to_string(map_bytes_) + " does not match its header (" + std::to_string(count) +
         " tokens): the shard is truncated or was not closed");
  count_ = static_cast<int64_t>(count);
  vocab_size_ = static_cast<int64_t>(vocab);
  const uint64_t expected = kShardHeaderBytes + static_cast<uint64_t>(count_) * bytes_per_token_;
  if (expected != map_bytes_)
    fail("size " + std::to_string(map_bytes_) + " does not match its header (" +
         std::to_string(count_) + " tokens): the shard is truncated or was not closed");
  tokens_ = bytes + kShardHeaderBytes;
  ::madvise(map_, map_bytes_, MADV_RANDOM);
}

TokenShard::~TokenShard() {
  if (map_) ::munmap(map_, map_bytes_);
}

uint32_t TokenShard::raw(int64_t i) const {
  const uint8_t* p = tokens_ + i * bytes_per_token_;
  return bytes_per_token_ == 2 ? static_cast<uint32_t>(p[0] | (p[1] << 8)) : get_u32(p);
}

std::string TokenShard::describe_token(int64_t i) const {
  return path_ + ": token " + std::to_string(i) + " is " + std::to_string(raw(i)) +
         ", outside the vocabulary of " + std::to_string(vocab_size_) +
         " (the shard is damaged or was not made with this tokenizer)";
}

void TokenShard::read(int64_t start, std::span<int32_t> out) const {
  if (start < 0 || start + static_cast<int64_t>(out.size()) > count_)
    throw std::out_of_range(path_ + ": read past the end of the shard");
  const auto vocab = static_cast<uint64_t>(vocab_size_);
  for (size_t i = 0; i < out.size(); ++i) {
    const uint32_t t = raw(start + static_cast<int64_t>(i));
    if (t >= vocab) throw DataError(describe_token(start + static_cast<int64_t>(i)));
    out[i] = static_cast<int32_t>(t);
  }
}

int32_t TokenShard::at(int64_t i) const {
  int32_t t = 0;
  read(i, std::span<int32_t>(&t, 1));
  return t;
}

std::optional<int64_t> TokenShard::find_out_of_vocabulary(int64_t start, int64_t count) const {
  start = std::clamp<int64_t>(start, 0, count_);
  const int64_t end = std::clamp<int64_t>(start + count, start, count_);
  const auto vocab = static_cast<uint64_t>(vocab_size_);
  for (int64_t i = start; i < end; ++i)
    if (raw(i) >= vocab) return i;
  return std::nullopt;
}

TokenStream::TokenStream(const std::vector<std::string>& shard_paths) {
  int64_t total = 0;
  for (const auto& path : shard_paths) {
    auto shard = std::make_unique<TokenShard>(path);
    if (vocab_size_ != 0 && shard->vocab_size() != vocab_size_)
      throw DataError(path + ": vocabulary size " + std::to_string(shard->vocab_size()) +
                               " differs from the other shards' " + std::to_string(vocab_size_));
    vocab_size_ = shard->vocab_size();
    starts_.push_back(total);
    total += shard->size();
    shards_.push_back(std::move(shard));
  }
  starts_.push_back(total);
}

void TokenStream::read(int64_t start, std::span<int32_t> out) const {
  const int64_t end = start + static_cast<int64_t>(out.size());
  if (start < 0 || end > size()) throw std::out_of_range("token stream: read past the end");
  // Index of the shard holding `start`: the last shard starting at or before it.
  size_t s = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end() - 1, start) -
                                 starts_.begin()) - 1;
  int64_t pos = start;
  size_t written = 0;
  while (pos < end) {
    const int64_t shard_end = starts_[s + 1];
    const int64_t take = std::min(end, shard_end) - pos;
    shards_[s]->read(pos - starts_[s], out.subspan(written, static_cast<size_t>(take)));
    written += static_cast<size_t>(take);
    pos += take;
    ++s;
  }
}

}  // namespace mxablate::data
