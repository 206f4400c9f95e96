// Reading documents from the inputs of `mxablate data prepare`.
//
// Two kinds of file:
// - JSON lines, plain or gzip-compressed (*.json, *.jsonl, *.json.gz, *.jsonl.gz — C4's
//   layout): one JSON object per line whose "text" field is one document.
// - Anything else is UTF-8 plain text: documents are separated by blank lines, and the lines of
//   one document are joined with single spaces (hard-wrapped prose becomes one paragraph).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mxablate::data {

enum class DocumentFormat { kPlainText, kJsonLines };

DocumentFormat document_format_of(const std::string& path);
bool is_gzip_path(const std::string& path);

// Bad inputs (missing files, malformed JSON lines) throw std::invalid_argument naming file:line.
//
// Expands the inputs: files are kept as given; directories contribute their regular files with
// a known extension (.txt, .text, .json, .jsonl, .json.gz, .jsonl.gz), recursively, sorted by
// path. Throws naming the input if it does not exist or a directory holds no such file.
std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs);

// Reads one file line by line (transparently gunzipping *.gz).
class LineReader {
 public:
  explicit LineReader(const std::string& path);
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;
  bool next(std::string& line);  // false at the end; the line has no '\n' (nor a trailing '\r')
  int64_t line_number() const { return line_number_; }

 private:
  bool fill();
  std::string path_;
  void* gz_ = nullptr;     // gzFile when compressed
  std::FILE* file_ = nullptr;
  std::vector<char> buffer_;
  size_t begin_ = 0, end_ = 0;
  bool eof_ = false;
  int64_t line_number_ = 0;
};

class DocumentReader {
 public:
  explicit DocumentReader(const std::string& path);
  // Next non-empty document; false at the end. Throws naming file:line on malformed JSON.
  bool next(std::string& document);

 private:
  std::string path_;
  DocumentFormat format_;
  LineReader lines_;
};

// Cuts a document into pieces of at most max_bytes, at whitespace where possible (for the
// tokenizer trainer, which skips longer "sentences").
std::vector<std::string> split_for_tokenizer_training(const std::string& document,
                                                      size_t max_bytes);

}  // namespace mxablate::data
