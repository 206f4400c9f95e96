#include "mxablate/data/megatron_index.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace mxablate::data {
namespace {

constexpr size_t kChunkBytes = size_t{1} << 20;

// Megatron-LM's DType enum, code by code.
constexpr MegatronDtype kDtypes[] = {
    {1, "uint8", 1, false, true},    {2, "int8", 1, true, true},
    {3, "int16", 2, true, true},     {4, "int32", 4, true, true},
    {5, "int64", 8, true, true},     {6, "float64", 8, true, false},
    {7, "float32", 4, true, false},  {8, "uint16", 2, false, true},
};

uint64_t get_le(const uint8_t* p, int width) {
  uint64_t v = 0;
  for (int i = 0; i < width; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

int64_t sign_extend(uint64_t v, int width) {
  if (width == 8) return static_cast<int64_t>(v);
  const uint64_t sign = uint64_t{1} << (8 * width - 1);
  return static_cast<int64_t>((v ^ sign) - sign);
}

// Bytes shown as a C string literal: printable ASCII as is, the rest as \xNN.
std::string escaped(const uint8_t* p, size_t n) {
  std::string out = "\"";
  for (size_t i = 0; i < n; ++i) {
    if (p[i] >= 0x20 && p[i] < 0x7f && p[i] != '"' && p[i] != '\\') {
      out += static_cast<char>(p[i]);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", p[i]);
      out += hex;
    }
  }
  return out + "\"";
}

std::string str(int64_t v) { return std::to_string(v); }

}  // namespace

const MegatronDtype* megatron_dtype(int code) {
  for (const auto& d : kDtypes)
    if (d.code == code) return &d;
  return nullptr;
}

ReadOnlyFile::ReadOnlyFile(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw std::invalid_argument(path_ + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    throw std::invalid_argument(path_ + ": not a regular file");
  }
  size_ = static_cast<int64_t>(st.st_size);
}

ReadOnlyFile::~ReadOnlyFile() {
  if (fd_ >= 0) ::close(fd_);
}

void ReadOnlyFile::read_exact(int64_t offset, void* out, size_t n, std::string_view field) const {
  auto* dst = static_cast<uint8_t*>(out);
  size_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd_, dst + done, n - done, static_cast<off_t>(offset) +
                                                               static_cast<off_t>(done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0)
      throw std::runtime_error(path_ + ": " + std::string(field) + ": read failed: " +
                               std::strerror(errno));
    if (got == 0)
      throw std::invalid_argument(path_ + ": " + std::string(field) + ": the file ends at byte " +
                                  str(offset + static_cast<int64_t>(done)) +
                                  " (it was " + str(size_) +
                                  " bytes when opened: did it change while being read?)");
    done += static_cast<size_t>(got);
  }
}

IntArrayReader::IntArrayReader(const ReadOnlyFile& file, std::string field, int64_t offset,
                               int64_t count, int width, bool is_signed)
    : file_(file), field_(std::move(field)), offset_(offset), count_(count), width_(width),
      signed_(is_signed) {}

int64_t IntArrayReader::next() {
  if (index_ >= count_)
    throw std::logic_error(file_.path() + ": " + field_ + ": read past its " + str(count_) +
                           " elements");
  if (used_ == buffered_) {
    const int64_t left_bytes = (count_ - index_) * width_;
    buffered_ = static_cast<size_t>(std::min<int64_t>(left_bytes, kChunkBytes));
    buffer_.resize(buffered_);
    file_.read_exact(offset_ + index_ * width_, buffer_.data(), buffered_, field_);
    used_ = 0;
  }
  const uint64_t raw = get_le(buffer_.data() + used_, width_);
  used_ += static_cast<size_t>(width_);
  ++index_;
  return signed_ ? sign_extend(raw, width_) : static_cast<int64_t>(raw);
}

MegatronIndexedDataset::MegatronIndexedDataset(const std::string& prefix)
    : prefix_(prefix), idx_(prefix + ".idx"), bin_(prefix + ".bin") {
  read_header();
  check_arrays();
}

void MegatronIndexedDataset::read_header() {
  const std::string& path = idx_.path();
  const auto fail = [&](const std::string& field, const std::string& why) {
    throw std::invalid_argument(path + ": " + field + ": " + why);
  };
  uint8_t h[kMegatronHeaderBytes] = {};
  const size_t have = static_cast<size_t>(std::min<int64_t>(idx_.size(), kMegatronHeaderBytes));
  idx_.read_exact(0, h, have, "header");
  const size_t magic_have = std::min(have, sizeof kMegatronIndexMagic);
  if (std::memcmp(h, kMegatronIndexMagic, magic_have) != 0)
    fail("magic", "expected \"MMIDIDX\\x00\\x00\" (a Megatron-LM indexed dataset index), found " +
                      escaped(h, magic_have));
  if (have < static_cast<size_t>(kMegatronHeaderBytes))
    fail("header", "the file has " + str(idx_.size()) + " bytes; the header alone needs " +
                       str(kMegatronHeaderBytes) + " (truncated)");

  const uint64_t version = get_le(h + 9, 8);
  if (version != kMegatronIndexVersion)
    fail("version", std::to_string(version) + " is not supported (expected " +
                        std::to_string(kMegatronIndexVersion) + ")");
  const int code = h[17];
  dtype_ = megatron_dtype(code);
  if (!dtype_)
    fail("dtype", "code " + std::to_string(code) + " is not a Megatron-LM dtype (codes 1-8)");
  if (!dtype_->is_integer)
    fail("dtype", std::string(dtype_->name) + " (code " + std::to_string(code) +
                      ") cannot hold token ids; expected an integer dtype (Megatron-LM writes "
                      "uint16 or int32)");

  // The counts are checked against the bytes that follow before any product is formed, so a
  // huge claimed count can overflow nothing and is never allocated.
  const uint64_t n = get_le(h + 18, 8);
  const uint64_t d = get_le(h + 26, 8);
  const uint64_t body = static_cast<uint64_t>(idx_.size() - kMegatronHeaderBytes);
  if (n > body / 12)
    fail("sequence_count", std::to_string(n) + " sequences need 12 bytes each (length and "
                           "pointer) but only " + std::to_string(body) +
                           " bytes follow the header (truncated, or not this index)");
  const uint64_t after_sequences = body - 12 * n;
  if (d == 0)
    fail("document_count", "0, but the document indices always hold at least the leading 0");
  if (d > after_sequences / 8)
    fail("document_count", std::to_string(d) + " document indices need 8 bytes each but only " +
                               std::to_string(after_sequences) +
                               " bytes follow the sequence arrays (truncated)");
  const uint64_t rest = after_sequences - 8 * d;
  if (rest != 0 && rest != n)
    fail("size", std::to_string(rest) + " bytes follow the document indices; expected 0, or " +
                     std::to_string(n) + " (one mode byte per sequence in a multimodal index)");
  sequence_count_ = static_cast<int64_t>(n);
  document_index_count_ = static_cast<int64_t>(d);
  has_modes_ = n > 0 && rest == n;
}

IntArrayReader MegatronIndexedDataset::sequence_lengths() const {
  return {idx_, "sequence_lengths", kMegatronHeaderBytes, sequence_count_, 4, true};
}
IntArrayReader MegatronIndexedDataset::sequence_pointers() const {
  return {idx_, "sequence_pointers", kMegatronHeaderBytes + 4 * sequence_count_, sequence_count_,
          8, true};
}
IntArrayReader MegatronIndexedDataset::document_indices() const {
  return {idx_, "document_indices", kMegatronHeaderBytes + 12 * sequence_count_,
          document_index_count_, 8, true};
}
IntArrayReader MegatronIndexedDataset::sequence_modes() const {
  return {idx_, "sequence_modes",
          kMegatronHeaderBytes + 12 * sequence_count_ + 8 * document_index_count_,
          has_modes_ ? sequence_count_ : 0, 1, true};
}

void MegatronIndexedDataset::check_arrays() const {
  const auto fail = [&](const IntArrayReader& r, int64_t i, const std::string& why) {
    throw std::invalid_argument(idx_.path() + ": " + r.field() + "[" + str(i) + "] = " + why);
  };
  const int64_t item = dtype_->bytes;
  const int64_t bin_bytes = bin_.size();

  // Lengths and pointers together: each sequence lies inside .bin and starts where the previous
  // one ended, so the sequences tile .bin from byte 0 and the import can read it front to back.
  IntArrayReader lengths = sequence_lengths();
  IntArrayReader pointers = sequence_pointers();
  int64_t end = 0;  // where the previous sequence ended
  for (int64_t i = 0; i < sequence_count_; ++i) {
    const int64_t length = lengths.next();
    const int64_t pointer = pointers.next();
    if (length < 0) fail(lengths, i, str(length) + " is negative");
    if (pointer < 0) fail(pointers, i, str(pointer) + " is negative");
    if (pointer > bin_bytes || length > (bin_bytes - pointer) / item)
      fail(pointers, i, str(pointer) + " with sequence_lengths[" + str(i) + "] = " + str(length) +
                            " (" + std::string(dtype_->name) + ") reaches past the end of " +
                            bin_.path() + " (" + str(bin_bytes) + " bytes)");
    if (pointer != end)
      fail(pointers, i, str(pointer) + " but the previous sequence ends at byte " + str(end) +
                            " (pointers and lengths disagree)");
    end = pointer + length * item;
  }
  if (end != bin_bytes)
    throw std::invalid_argument(bin_.path() + ": size: " + str(bin_bytes) +
                                " bytes, but the index's sequences cover " + str(end) +
                                " (not the data of this index?)");

  IntArrayReader indices = document_indices();
  int64_t previous = 0;
  for (int64_t k = 0; k < document_index_count_; ++k) {
    const int64_t v = indices.next();
    if (k == 0 && v != 0) fail(indices, k, str(v) + " (expected 0)");
    if (v < previous)
      fail(indices, k, str(v) + " is less than document_indices[" + str(k - 1) + "] = " +
                           str(previous) + " (not monotone)");
    if (v > sequence_count_)
      fail(indices, k, str(v) + " is past the sequence count " + str(sequence_count_));
    previous = v;
  }
  if (previous != sequence_count_)
    fail(indices, document_index_count_ - 1,
         str(previous) + " but the index has " + str(sequence_count_) +
             " sequences (the last ones would belong to no document)");

  if (has_modes_) {
    IntArrayReader modes = sequence_modes();
    for (int64_t i = 0; i < sequence_count_; ++i)
      if (const int64_t m = modes.next(); m != 0)
        fail(modes, i, str(m) + ": not a text sequence (multimodal data cannot be imported as "
                                "tokens)");
  }
}

}  // namespace mxablate::data
