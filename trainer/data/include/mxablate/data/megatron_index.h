// Reading Megatron-LM indexed datasets (megatron/core/datasets/indexed_dataset.py): a pair of
// files PREFIX.idx (the index) and PREFIX.bin (the tokens, back to back).
//
// PREFIX.idx, little-endian, no padding:
//   9 bytes  magic "MMIDIDX\x00\x00"
//   uint64   version (1)
//   uint8    dtype code of the tokens in .bin: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64,
//            6 float64, 7 float32, 8 uint16 (Megatron writes uint16 for vocabularies under
//            65500, int32 otherwise)
//   uint64   sequence count N
//   uint64   document-index count D (= documents + 1)
//   int32[N] sequence lengths, in tokens
//   int64[N] sequence pointers, byte offsets into .bin (each sequence follows the previous one)
//   int64[D] document indices: 0, then the index of the first sequence after each document; the
//            last is N. Document k is sequences [indices[k], indices[k+1]).
//   int8[N]  sequence modes, only in multimodal datasets (0 = text). Nothing in the header says
//            whether they are there: the file size does.
//
// Every count and offset is checked against the file sizes before it is used, and the arrays
// are read in chunks, so a hostile index can neither make us allocate what it claims nor read
// past a file. Problems are std::invalid_argument "FILE: FIELD: what is wrong".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mxablate::data {

inline constexpr char kMegatronIndexMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
inline constexpr uint64_t kMegatronIndexVersion = 1;
inline constexpr int64_t kMegatronHeaderBytes = 9 + 8 + 1 + 8 + 8;

struct MegatronDtype {
  int code = 0;
  std::string_view name;  // numpy's name: "uint16", "int32", …
  int bytes = 0;
  bool is_signed = false;
  bool is_integer = false;
};

// The dtype with this code; nullptr for a code Megatron-LM does not define.
const MegatronDtype* megatron_dtype(int code);

// A read-only file read with pread. Not memory-mapped: a mapped file that shrinks while it is
// read kills the process with SIGBUS, and a short read is an error we can name.
class ReadOnlyFile {
 public:
  explicit ReadOnlyFile(std::string path);  // throws std::invalid_argument naming the file
  ~ReadOnlyFile();
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;

  const std::string& path() const { return path_; }
  int64_t size() const { return size_; }
  // Reads exactly n bytes at offset; throws naming the file and `field` if it ends first.
  void read_exact(int64_t offset, void* out, size_t n, std::string_view field) const;

 private:
  std::string path_;
  int fd_ = -1;
  int64_t size_ = 0;
};

// The consecutive little-endian integers of one array of a file, read a chunk at a time.
class IntArrayReader {
 public:
  IntArrayReader(const ReadOnlyFile& file, std::string field, int64_t offset, int64_t count,
                 int width, bool is_signed);
  // The next element (sign-extended when signed). At most `count` may be read.
  int64_t next();
  int64_t index() const { return index_; }  // of the element next() returns
  const std::string& field() const { return field_; }

 private:
  const ReadOnlyFile& file_;
  std::string field_;
  int64_t offset_, count_;
  int width_;
  bool signed_;
  int64_t index_ = 0;
  std::vector<uint8_t> buffer_;
  size_t buffered_ = 0, used_ = 0;
};

// PREFIX.idx and PREFIX.bin opened, the header read and every array checked: lengths ≥ 0;
// pointers start at 0, each sequence follows the previous one (pointer + length × dtype bytes)
// and the last ends exactly at the end of .bin; document indices start at 0, never decrease and
// end at N; modes, when present, are all 0 (text).
class MegatronIndexedDataset {
 public:
  explicit MegatronIndexedDataset(const std::string& prefix);

  const std::string& prefix() const { return prefix_; }
  const ReadOnlyFile& idx() const { return idx_; }
  const ReadOnlyFile& bin() const { return bin_; }
  const MegatronDtype& dtype() const { return *dtype_; }
  int64_t sequences() const { return sequence_count_; }
  int64_t documents() const { return document_index_count_ - 1; }
  bool has_modes() const { return has_modes_; }

  IntArrayReader sequence_lengths() const;
  IntArrayReader sequence_pointers() const;
  IntArrayReader document_indices() const;
  IntArrayReader sequence_modes() const;  // only when has_modes()

 private:
  void read_header();
  void check_arrays() const;

  std::string prefix_;
  ReadOnlyFile idx_;
  ReadOnlyFile bin_;
  const MegatronDtype* dtype_ = nullptr;
  int64_t sequence_count_ = 0;
  int64_t document_index_count_ = 0;
  bool has_modes_ = false;
};

}  // namespace mxablate::data
