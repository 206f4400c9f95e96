#include "mxablate/data/data_prepare.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <ostream>
#include <stdexcept>
#include <thread>

#include "mxablate/data/output_dir.h"
#include "mxablate/data/sha256.h"
#include "mxablate/data/split_writer.h"
#include "mxablate/data/text_documents.h"
#include "mxablate/data/token_shards.h"

namespace mxablate::data {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxTrainingSentenceBytes = 4000;  // SentencePiece skips longer ones (4192)
// A batch of documents encoded together: at most this many, and at most this many bytes, so the
// batch's text and ids stay a bounded share of the memory (docs/design.md §4 "Reading input").
constexpr size_t kEncodeBatchDocuments = 2048;
constexpr size_t kEncodeBatchBytes = size_t{32} << 20;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void validate(const DataPrepareOptions& o) {
  if (o.inputs.empty()) throw std::invalid_argument("--input: at least one file or directory");
  if (o.out_dir.empty()) throw std::invalid_argument("--out: required");
  if (o.tokenizer_model.empty() && (o.vocab_size < 16 || o.vocab_size > (int64_t{1} << 31)))
    throw std::invalid_argument("--vocab-size: must be in [16, 2^31], got " +
                                std::to_string(o.vocab_size));
  validate_split_options(o.val_fraction, o.shard_tokens);
  if (!(o.character_coverage > 0 && o.character_coverage <= 1))
    throw std::invalid_argument("--character-coverage: must be in (0, 1]");
  if (o.tokenizer_max_sentences < 1)
    throw std::invalid_argument("--tokenizer-sentences: must be >= 1");
  if (!o.tokenizer_model.empty() && !fs::is_regular_file(o.tokenizer_model))
    throw std::invalid_argument("--tokenizer: " + o.tokenizer_model + ": no such file");
  validate_text_limits(o.limits);
}

// Feeds the documents of every input to the SentencePiece trainer, in pieces it accepts.
class DocumentSentences : public sentencepiece::SentenceIterator {
 public:
  DocumentSentences(const std::vector<std::string>& files, const TextLimits& limits)
      : files_(files), limits_(limits) {
    advance();
  }
  bool done() const override { return done_; }
  void Next() override { advance(); }
  const std::string& value() const override { return pending_[index_]; }
  sentencepiece::util::Status status() const override { return status_; }

 private:
  void advance() {
    if (!pending_.empty() && ++index_ < pending_.size()) return;
    pending_.clear();
    index_ = 0;
    try {
      std::string doc;
      while (pending_.empty()) {
        if (!reader_) {
          if (file_ == files_.size()) {
            done_ = true;
            return;
          }
          reader_ = std::make_unique<DocumentReader>(files_[file_++], limits_);
        }
        if (!reader_->next(doc)) {
          reader_.reset();
          continue;
        }
        pending_ = split_for_tokenizer_training(doc, kMaxTrainingSentenceBytes);
      }
    } catch (const std::exception& e) {
      status_ = sentencepiece::util::Status(sentencepiece::util::StatusCode::kInternal, e.what());
      error_ = std::current_exception();
      done_ = true;
    }
  }

 public:
  // A document that could not be read (bad input: invalid_argument, exit 2) is rethrown as it
  // was, not as the trainer's failure (docs/design.md §11: errors carry their context up).
  void rethrow_input_error() const {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  std::exception_ptr error_;

  const std::vector<std::string>& files_;
  TextLimits limits_;
  size_t file_ = 0;
  std::unique_ptr<DocumentReader> reader_;
  std::vector<std::string> pending_;
  size_t index_ = 0;
  bool done_ = false;
  sentencepiece::util::Status status_;
};

void train_tokenizer(const DataPrepareOptions& o, const std::vector<std::string>& files,
                     const std::string& model_prefix, int threads) {
  sentencepiece::SetRandomGeneratorSeed(static_cast<unsigned>(o.tokenizer_seed));
  DocumentSentences sentences(files, o.limits);
  std::unordered_map<std::string, std::string> args = {
      {"model_prefix", model_prefix},
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(o.vocab_size)},
      {"character_coverage", std::to_string(o.character_coverage)},
      {"byte_fallback", o.byte_fallback ? "true" : "false"},
      {"input_sentence_size", std::to_string(o.tokenizer_max_sentences)},
      {"shuffle_input_sentence", "true"},
      {"split_digits", "true"},
      {"num_threads", std::to_string(threads)},
      {"minloglevel", "2"},
  };
  if (o.keep_whitespace) {
    args["normalization_rule_name"] = "identity";
    args["remove_extra_whitespaces"] = "false";
    args["allow_whitespace_only_pieces"] = "true";
  }
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, &sentences);
  sentences.rethrow_input_error();
  // What fails here is the inputs against the options (a vocabulary larger than the text
  // allows, no sentence at all): bad input, exit 2, in SentencePiece's words.
  if (!status.ok())
    throw std::invalid_argument("--vocab-size " + std::to_string(o.vocab_size) +
                                ": training the SentencePiece tokenizer on the inputs failed: " + status.ToString());
}

nlohmann::json options_json(const DataPrepareOptions& o) {
  return {{"tokenizer_model", o.tokenizer_model},
          {"vocab_size", o.vocab_size},
          {"character_coverage", o.character_coverage},
          {"byte_fallback", o.byte_fallback},
          {"keep_whitespace", o.keep_whitespace},
          {"tokenizer_max_sentences", o.tokenizer_max_sentences},
          {"tokenizer_seed", o.tokenizer_seed},
          {"val_fraction", o.val_fraction},
          {"split_seed", o.split_seed},
          {"shard_tokens", o.shard_tokens},
          {"max_line_bytes", o.limits.max_line_bytes},
          {"max_document_bytes", o.limits.max_document_bytes}};
}

}  // namespace

Manifest prepare_data(const DataPrepareOptions& o, std::ostream& log) {
  validate(o);
  const auto t0 = std::chrono::steady_clock::now();
  const int threads = o.threads > 0 ? o.threads
                                    : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const ExpandedInputs inputs = expand_inputs(o.inputs);
  const std::vector<std::string>& files = inputs.files;
  for (const auto& [path, problem] : inputs.skipped)
    log << "data prepare: skipped " << path << " (" << input_problem_name(problem) << ")\n";
  if (files.empty())
    throw std::invalid_argument("--input: no readable input file (" + std::to_string(inputs.skipped.size()) +
                                " skipped)");

  // Everything is written into OUT.partial, which any error below removes.
  PartialDir partial_dir(o.out_dir, o.force, files);
  const fs::path& partial = partial_dir.path();

  Manifest m;
  m.options = options_json(o);
  for (const auto& f : files)
    m.sources.push_back({f, static_cast<int64_t>(fs::file_size(f)), sha256_file(f), 0, 0, 0});
  for (const auto& [path, problem] : inputs.skipped) m.skipped.push_back({path, input_problem_name(problem)});

  // The tokenizer: train one on the inputs, or copy the given model beside the shards so the
  // data directory is self-contained.
  const fs::path tokenizer_path = partial / "tokenizer.model";
  if (o.tokenizer_model.empty()) {
    const auto t_tok = std::chrono::steady_clock::now();
    train_tokenizer(o, files, (partial / "tokenizer").string(), threads);
    m.tokenizer.trained_here = true;
    log << "data prepare: trained a " << o.vocab_size << "-token BPE tokenizer in "
        << seconds_since(t_tok) << " s\n";
  } else {
    fs::copy_file(o.tokenizer_model, tokenizer_path, fs::copy_options::overwrite_existing);
    m.tokenizer.given_path = o.tokenizer_model;
  }
  sentencepiece::SentencePieceProcessor sp;
  if (const auto status = sp.Load(tokenizer_path.string()); !status.ok())
    throw std::invalid_argument(tokenizer_path.string() + ": not a SentencePiece model: " +
                                status.ToString());
  m.tokenizer.file = "tokenizer.model";
  m.tokenizer.sha256 = sha256_file(tokenizer_path.string());
  m.tokenizer.vocab_size = sp.GetPieceSize();
  m.tokenizer.unk_id = sp.unk_id();
  m.tokenizer.bos_id = sp.bos_id();
  m.tokenizer.eos_id = sp.eos_id();
  m.tokenizer.model_type = o.tokenizer_model.empty() ? "bpe" : "given";
  m.bytes_per_token = m.tokenizer.vocab_size <= 65536 ? 2 : 4;

  // Encode: documents in order, a batch at a time, the batch's documents split across threads.
  // Each document is followed by EOS so the model sees document boundaries. A worker's error
  // (SentencePiece's status or an exception) ends the command in one line like any other.
  SplitWriter train(partial.string(), "train", m.tokenizer.vocab_size, o.shard_tokens);
  SplitWriter validation(partial.string(), "validation", m.tokenizer.vocab_size, o.shard_tokens);
  int64_t document_index = 0;
  std::vector<std::string> batch;
  size_t batch_bytes = 0;
  std::vector<std::vector<int>> encoded;
  const auto flush = [&](size_t source) {
    encoded.assign(batch.size(), {});
    std::vector<std::thread> workers;
    std::vector<std::string> errors(static_cast<size_t>(threads));
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        try {
          std::vector<int> ids;
          for (size_t i = static_cast<size_t>(t); i < batch.size(); i += static_cast<size_t>(threads)) {
            for (const std::string_view segment : encoding_segments(batch[i], o.limits)) {
              const auto status = sp.Encode(absl::string_view(segment.data(), segment.size()), &ids);
              if (!status.ok()) {
                errors[static_cast<size_t>(t)] = status.ToString();
                return;
              }
              encoded[i].insert(encoded[i].end(), ids.begin(), ids.end());
            }
            if (m.tokenizer.eos_id >= 0) encoded[i].push_back(static_cast<int>(m.tokenizer.eos_id));
          }
        } catch (const std::exception& e) {
          errors[static_cast<size_t>(t)] = e.what();
        }
      });
    }
    for (auto& w : workers) w.join();
    for (const auto& e : errors)
      if (!e.empty()) throw std::runtime_error(files[source] + ": encoding failed: " + e);
    auto& counted = m.sources[source];
    for (const auto& doc : batch) counted.text_bytes += static_cast<int64_t>(doc.size());
    for (const auto& ids : encoded) {
      counted.tokens += static_cast<int64_t>(ids.size());
      if (is_validation_document(o.split_seed, document_index++, o.val_fraction)) {
        validation.append_document(ids);
      } else {
        train.append_document(ids);
      }
    }
    m.sources[source].documents += static_cast<int64_t>(batch.size());
    batch.clear();
    batch_bytes = 0;
  };
  for (size_t s = 0; s < files.size(); ++s) {
    DocumentReader reader(files[s], o.limits);
    std::string doc;
    while (reader.next(doc)) {
      batch_bytes += doc.size();
      batch.push_back(std::move(doc));
      if (batch.size() == kEncodeBatchDocuments || batch_bytes >= kEncodeBatchBytes) flush(s);
    }
    if (!batch.empty()) flush(s);
  }
  m.train = train.finish();
  m.validation = validation.finish();
  if (m.train.tokens == 0) throw std::invalid_argument("--input: the inputs produced no training tokens");
  if (m.validation.tokens == 0)
    throw std::invalid_argument("--val-fraction: no document fell into the validation split (" +
                                std::to_string(document_index) + " documents); raise it or add text");

  write_manifest(partial.string(), m);
  const std::string composition = composition_table(m);
  {
    std::ofstream table(partial / kCompositionFile);
    table << composition;
    if (!table.flush())
      throw std::runtime_error((partial / kCompositionFile).string() + ": write failed");
  }
  partial_dir.publish();
  int64_t source_bytes = 0;
  for (const auto& s : m.sources) source_bytes += s.bytes;
  log << "data prepare: " << m.train.tokens << " train tokens (" << m.train.documents
      << " documents, " << m.train.shards.size() << " shards), " << m.validation.tokens
      << " validation tokens (" << m.validation.documents << " documents), vocabulary "
      << m.tokenizer.vocab_size << ", from " << files.size() << " sources (" << source_bytes
      << " bytes) in " << seconds_since(t0) << " s -> " << o.out_dir << "\n"
      << composition;
  return m;
}

}  // namespace mxablate::data
