// A small writer of Megatron-LM indexed datasets (PREFIX.idx + PREFIX.bin) for tests: the parts
// are built consistent from documents, and a test may then break any one of them on purpose.
// Written from the format (megatron/core/datasets/indexed_dataset.py), independent of the
// importer it tests.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace mxablate::test {

// A document is a list of sequences; a sequence a list of token ids.
using MegatronDocument = std::vector<std::vector<int64_t>>;

inline int megatron_dtype_bytes(int code) {
  switch (code) {
    case 1: case 2: return 1;
    case 3: case 8: return 2;
    case 4: case 7: return 4;
    default: return 8;
  }
}

struct MegatronParts {
  std::string magic = std::string("MMIDIDX\0\0", 9);
  uint64_t version = 1;
  uint8_t dtype = 8;
  uint64_t sequence_count = 0;
  uint64_t document_count = 0;  // entries of document_indices
  std::vector<int32_t> lengths;
  std::vector<int64_t> pointers;
  std::vector<int64_t> document_indices;
  std::vector<int8_t> modes;  // written when not empty
  std::string bin;

  std::string idx_bytes() const {
    std::string out = magic;
    const auto put = [&out](uint64_t v, int bytes) {
      for (int i = 0; i < bytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
    };
    put(version, 8);
    put(dtype, 1);
    put(sequence_count, 8);
    put(document_count, 8);
    for (int32_t v : lengths) put(static_cast<uint32_t>(v), 4);
    for (int64_t v : pointers) put(static_cast<uint64_t>(v), 8);
    for (int64_t v : document_indices) put(static_cast<uint64_t>(v), 8);
    for (int8_t v : modes) put(static_cast<uint8_t>(v), 1);
    return out;
  }
};

// What Megatron-LM's IndexedDatasetBuilder writes for these documents (add_document each).
inline MegatronParts megatron_parts(const std::vector<MegatronDocument>& documents, int dtype) {
  MegatronParts p;
  p.dtype = static_cast<uint8_t>(dtype);
  const int item = megatron_dtype_bytes(dtype);
  p.document_indices.push_back(0);
  for (const auto& doc : documents) {
    for (const auto& seq : doc) {
      p.pointers.push_back(static_cast<int64_t>(p.bin.size()));
      p.lengths.push_back(static_cast<int32_t>(seq.size()));
      for (int64_t t : seq)
        for (int i = 0; i < item; ++i)
          p.bin += static_cast<char>((static_cast<uint64_t>(t) >> (8 * i)) & 0xff);
    }
    p.document_indices.push_back(static_cast<int64_t>(p.lengths.size()));
  }
  p.sequence_count = p.lengths.size();
  p.document_count = p.document_indices.size();
  return p;
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline void write_megatron(const std::string& prefix, const MegatronParts& p) {
  write_file(prefix + ".idx", p.idx_bytes());
  write_file(prefix + ".bin", p.bin);
}

// Deterministic documents: `count` documents of 0-3 sequences of 0-40 ids in [0, vocab), some of
// them empty; ids near both ends of the range appear.
inline std::vector<MegatronDocument> random_documents(int count, int64_t vocab, uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  const auto next = [&s] {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    return s;
  };
  std::vector<MegatronDocument> docs(static_cast<size_t>(count));
  for (auto& doc : docs) {
    doc.resize(next() % 4);
    for (auto& seq : doc) {
      seq.resize(next() % 41);
      for (auto& t : seq) t = static_cast<int64_t>(next() % static_cast<uint64_t>(vocab));
    }
  }
  docs[0].push_back({0, vocab - 1, 1, vocab - 2});
  return docs;
}

// Learnable documents: `count` documents of `sequences(d)` sequences of `length` ids counting
// up mod `vocab` from a pseudo-random start.
template <typename SequencesOf>
inline std::vector<MegatronDocument> counting_documents(int count, int length, int64_t vocab, uint64_t seed,
                                                        SequencesOf sequences) {
  std::vector<MegatronDocument> docs;
  uint64_t s = seed;
  for (int d = 0; d < count; ++d) {
    MegatronDocument doc(static_cast<size_t>(sequences(d)));
    for (auto& seq : doc) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      const int64_t start = static_cast<int64_t>(s >> 56);
      for (int i = 0; i < length; ++i) seq.push_back((start + i) % vocab);
    }
    docs.push_back(doc);
  }
  return docs;
}

}  // namespace mxablate::test
