#include "mxablate/data/megatron_import.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <ostream>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "mxablate/data/megatron_index.h"
#include "mxablate/data/output_dir.h"
#include "mxablate/data/sha256.h"
#include "mxablate/data/split_writer.h"

namespace mxablate::data {
namespace {

namespace fs = std::filesystem;

// Tokens are decoded with memcpy into the host's integers; Megatron-LM writes little-endian.
static_assert(std::endian::native == std::endian::little,
              "the importer assumes a little-endian host");

constexpr int64_t kChunkTokens = int64_t{1} << 20;
constexpr int64_t kProgressBytes = int64_t{1} << 31;

void validate(const MegatronImportOptions& o) {
  if (o.prefixes.empty())
    throw std::invalid_argument("--megatron: required (PREFIX of PREFIX.idx and PREFIX.bin)");
  if (o.out_dir.empty()) throw std::invalid_argument("--out: required");
  if (o.vocab_size < 1 || o.vocab_size > (int64_t{1} << 31))
    throw std::invalid_argument("--vocab-size: must be in [1, 2^31], got " +
                                std::to_string(o.vocab_size));
  validate_split_options(o.val_fraction, o.shard_tokens);
  if (!o.tokenizer.empty() && !fs::is_regular_file(o.tokenizer))
    throw std::invalid_argument("--tokenizer: " + o.tokenizer + ": no such file");
}

// True when `path` is `dir` or lies under it (after resolving what exists of both).

// Decodes n tokens of type T into out; returns the index of the first one outside
// [0, vocab_size), or n when all are inside. max_id is raised to the largest id seen.
template <typename T>
size_t decode_tokens(const uint8_t* raw, size_t n, int64_t vocab_size, int32_t* out,
                     int64_t& max_id) {
  for (size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, raw + i * sizeof(T), sizeof(T));
    if constexpr (std::is_signed_v<T>) {
      if (v < 0) return i;
    }
    if (static_cast<uint64_t>(v) >= static_cast<uint64_t>(vocab_size)) return i;
    out[i] = static_cast<int32_t>(v);
    max_id = std::max<int64_t>(max_id, v);
  }
  return n;
}

size_t decode_tokens(const MegatronDtype& dtype, const uint8_t* raw, size_t n, int64_t vocab_size,
                     int32_t* out, int64_t& max_id) {
  switch (dtype.code) {
    case 1: return decode_tokens<uint8_t>(raw, n, vocab_size, out, max_id);
    case 2: return decode_tokens<int8_t>(raw, n, vocab_size, out, max_id);
    case 3: return decode_tokens<int16_t>(raw, n, vocab_size, out, max_id);
    case 4: return decode_tokens<int32_t>(raw, n, vocab_size, out, max_id);
    case 5: return decode_tokens<int64_t>(raw, n, vocab_size, out, max_id);
    case 8: return decode_tokens<uint16_t>(raw, n, vocab_size, out, max_id);
    default: throw std::logic_error("decode_tokens: not an integer dtype");
  }
}

int64_t token_value(const MegatronDtype& dtype, const uint8_t* p) {
  int64_t v = 0;
  switch (dtype.code) {
    case 1: v = *p; break;
    case 2: v = static_cast<int8_t>(*p); break;
    case 3: { int16_t x; std::memcpy(&x, p, 2); v = x; break; }
    case 4: { int32_t x; std::memcpy(&x, p, 4); v = x; break; }
    case 5: { int64_t x; std::memcpy(&x, p, 8); v = x; break; }
    case 8: { uint16_t x; std::memcpy(&x, p, 2); v = x; break; }
    default: break;
  }
  return v;
}

// Reads .bin front to back (the index check guarantees the sequences tile it in order), turns
// each chunk into int32 ids checked against the vocabulary, and hashes exactly the bytes read.
class BinTokenReader {
 public:
  BinTokenReader(const MegatronIndexedDataset& ds, int64_t vocab_size, std::ostream& log)
      : ds_(ds), vocab_size_(vocab_size), log_(log),
        raw_(static_cast<size_t>(kChunkTokens * ds.dtype().bytes)),
        tokens_(static_cast<size_t>(kChunkTokens)) {}

  // Copies the next `count` tokens (sequence `sequence` of document `document`) into `split`.
  void copy(int64_t count, int64_t document, int64_t sequence, SplitWriter& split) {
    const int item = ds_.dtype().bytes;
    while (count > 0) {
      const int64_t take = std::min(count, kChunkTokens);
      const size_t bytes = static_cast<size_t>(take * item);
      ds_.bin().read_exact(offset_, raw_.data(), bytes, "tokens");
      hash_.update(raw_.data(), bytes);
      const size_t ok = decode_tokens(ds_.dtype(), raw_.data(), static_cast<size_t>(take),
                                      vocab_size_, tokens_.data(), max_id_);
      if (ok != static_cast<size_t>(take)) {
        const int64_t at = offset_ + static_cast<int64_t>(ok) * item;
        throw std::invalid_argument(
            ds_.bin().path() + ": token id " +
            std::to_string(token_value(ds_.dtype(), raw_.data() + ok * item)) + " at byte " +
            std::to_string(at) + " (document " + std::to_string(document) + ", sequence " +
            std::to_string(sequence) + ") is outside the vocabulary [0, " +
            std::to_string(vocab_size_) + ") of --vocab-size");
      }
      split.append(std::span<const int32_t>(tokens_.data(), static_cast<size_t>(take)));
      const int64_t before = offset_;
      offset_ += static_cast<int64_t>(bytes);
      count -= take;
      if (offset_ / kProgressBytes != before / kProgressBytes)
        log_ << "data import: " << offset_ / (1 << 20) << " of " << ds_.bin().size() / (1 << 20)
             << " MiB of " << ds_.bin().path() << std::endl;
    }
  }

  int64_t offset() const { return offset_; }
  int64_t max_id() const { return max_id_; }
  std::string hex_digest() { return hash_.hex_digest(); }

 private:
  const MegatronIndexedDataset& ds_;
  int64_t vocab_size_;
  std::ostream& log_;
  std::vector<uint8_t> raw_;
  std::vector<int32_t> tokens_;
  int64_t offset_ = 0;
  int64_t max_id_ = -1;
  Sha256 hash_;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The tokenizer entry of the manifest; a given file is copied into `partial`.
TokenizerInfo tokenizer_info(const MegatronImportOptions& o, const fs::path& partial) {
  TokenizerInfo t;
  t.vocab_size = o.vocab_size;
  t.model_type = "";
  if (o.tokenizer.empty()) {
    t.type = "none";  // ids only; nothing in mxablate decodes them
    return t;
  }
  // Kept beside the shards so the directory says how its ids were made; mxablate never reads it
  // (the trainer needs only the vocabulary size), so any tokenizer file is accepted.
  t.type = "external";
  t.file = "tokenizer" + fs::path(o.tokenizer).extension().string();
  t.given_path = o.tokenizer;
  fs::copy_file(o.tokenizer, partial / t.file);
  t.sha256 = sha256_file((partial / t.file).string());
  return t;
}

// Writes the prepared directory into `partial`; returns its manifest. Documents are numbered
// across the datasets in the order given, and that number decides the split.
Manifest import_into(const MegatronImportOptions& o,
                     const std::vector<std::unique_ptr<MegatronIndexedDataset>>& datasets,
                     const fs::path& partial, std::ostream& log) {
  Manifest m;
  m.tokenizer = tokenizer_info(o, partial);
  m.bytes_per_token = o.vocab_size <= 65536 ? 2 : 4;

  SplitWriter train(partial.string(), "train", o.vocab_size, o.shard_tokens);
  SplitWriter validation(partial.string(), "validation", o.vocab_size, o.shard_tokens);
  int64_t document_number = 0, sequences = 0, max_id = -1;
  nlohmann::json described = nlohmann::json::array();
  for (const auto& ds : datasets) {
    BinTokenReader tokens(*ds, o.vocab_size, log);
    IntArrayReader lengths = ds->sequence_lengths();
    IntArrayReader indices = ds->document_indices();
    int64_t first = indices.next();  // 0
    for (int64_t doc = 0; doc < ds->documents(); ++doc) {
      const int64_t end = indices.next();
      SplitWriter& split = is_validation_document(o.split_seed, document_number++, o.val_fraction)
                               ? validation
                               : train;
      split.begin_document();
      for (int64_t s = first; s < end; ++s) tokens.copy(lengths.next(), doc, s, split);
      first = end;
    }
    // The index was checked in a first pass; a file rewritten since shows up here.
    if (tokens.offset() != ds->bin().size())
      throw std::invalid_argument(ds->bin().path() + ": size: the index's sequences cover " +
                                  std::to_string(tokens.offset()) + " of its " +
                                  std::to_string(ds->bin().size()) +
                                  " bytes on the second pass (did the files change during the "
                                  "import?)");
    // The .bin's digest is of the bytes just imported; the index is small next to it.
    m.sources.push_back(
        {ds->idx().path(), ds->idx().size(), sha256_file(ds->idx().path()), ds->documents()});
    m.sources.push_back(
        {ds->bin().path(), ds->bin().size(), tokens.hex_digest(), ds->documents()});
    described.push_back({{"prefix", ds->prefix()},
                         {"dtype", std::string(ds->dtype().name)},
                         {"sequences", ds->sequences()},
                         {"documents", ds->documents()},
                         {"sequence_modes", ds->has_modes()},
                         {"max_token_id", tokens.max_id()}});
    sequences += ds->sequences();
    max_id = std::max(max_id, tokens.max_id());
    log << "data import: " << ds->prefix() << ".{idx,bin}: " << ds->documents() << " documents, "
        << ds->sequences() << " sequences, " << ds->bin().size() << " bytes of "
        << ds->dtype().name << " ids, largest " << tokens.max_id() << std::endl;
  }
  m.train = train.finish();
  m.validation = validation.finish();
  const std::string what = datasets.size() == 1 ? datasets[0]->prefix()
                                                : std::to_string(datasets.size()) + " datasets";
  if (m.train.tokens == 0)
    throw std::invalid_argument(what + ": no training tokens (" + std::to_string(document_number) +
                                " documents, " + std::to_string(m.validation.tokens) +
                                " validation tokens)");
  if (m.validation.tokens == 0)
    throw std::invalid_argument(what + ": no tokens fell into the validation split (" +
                                std::to_string(document_number) +
                                " documents); raise --val-fraction");

  nlohmann::json prefixes = nlohmann::json::array();
  for (const auto& ds : datasets) prefixes.push_back(ds->prefix());
  m.options = {{"importer", "megatron"},
               {"megatron_prefixes", prefixes},
               {"datasets", described},
               {"sequences", sequences},
               {"documents", document_number},
               {"vocab_size", o.vocab_size},
               {"max_token_id", max_id},
               {"tokenizer", o.tokenizer},
               {"val_fraction", o.val_fraction},
               {"split_seed", o.split_seed},
               {"shard_tokens", o.shard_tokens}};
  log << "data import: largest token id " << max_id << " (vocabulary " << o.vocab_size
      << " from --vocab-size)\n";
  return m;
}

}  // namespace

std::string megatron_prefix(const std::string& given) {
  if (fs::exists(given + ".idx")) return given;
  for (const char* suffix : {".idx", ".bin"}) {
    const std::string s = suffix;
    if (given.size() > s.size() && given.compare(given.size() - s.size(), s.size(), s) == 0) {
      const std::string stripped = given.substr(0, given.size() - s.size());
      if (fs::exists(stripped + ".idx")) return stripped;
    }
  }
  return given;
}

Manifest import_megatron(const MegatronImportOptions& o, std::ostream& log) {
  validate(o);
  const auto t0 = std::chrono::steady_clock::now();
  // Every index is checked, in full, before anything is written.
  std::vector<std::unique_ptr<MegatronIndexedDataset>> datasets;
  int64_t bin_bytes = 0;
  for (const auto& given : o.prefixes) {
    auto ds = std::make_unique<MegatronIndexedDataset>(megatron_prefix(given));
    for (const auto& other : datasets)
      if (fs::equivalent(other->idx().path(), ds->idx().path()))
        throw std::invalid_argument("--megatron: " + ds->prefix() +
                                    " is given twice (its documents would be imported twice)");
    bin_bytes += ds->bin().size();
    datasets.push_back(std::move(ds));
  }

  std::vector<std::string> sources;
  for (const auto& ds : datasets)
    for (const auto& source : {ds->idx().path(), ds->bin().path()}) sources.push_back(source);
  PartialDir partial(o.out_dir, o.force, sources);
  const Manifest m = import_into(o, datasets, partial.path(), log);
  write_manifest(partial.path().string(), m);
  partial.publish();
  log << "data import: " << m.train.tokens << " train tokens (" << m.train.documents
      << " documents, " << m.train.shards.size() << " shards), " << m.validation.tokens
      << " validation tokens (" << m.validation.documents << " documents), vocabulary "
      << m.tokenizer.vocab_size << ", from " << datasets.size() << " Megatron dataset(s) ("
      << bin_bytes << " bytes of tokens) in " << seconds_since(t0) << " s -> " << o.out_dir
      << "\n";
  return m;
}

}  // namespace mxablate::data
