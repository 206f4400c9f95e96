// Reading documents from the inputs of `mxablate data prepare`, through the one input reader
// (input_file.h: verified gzip, bounded lines and documents, the tree walk).
//
// Two kinds of file:
// - JSON lines, plain or gzip-compressed (*.json, *.jsonl, *.json.gz, *.jsonl.gz — C4's
//   layout): one JSON object per line whose "text" field is one document.
// - Anything else is UTF-8 plain text: documents are separated by blank lines, and the lines of
//   one document are joined with single spaces (hard-wrapped prose becomes one paragraph).
// A document longer than TextLimits::max_document_bytes is cut as `data collect` cuts one
// (split_into_documents), so no input makes one document that no tokenizer worker can hold.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "mxablate/data/input_file.h"

namespace mxablate::data {

enum class DocumentFormat { kPlainText, kJsonLines };

DocumentFormat document_format_of(const std::string& path);

// Bad inputs (missing, unreadable or damaged files, malformed JSON lines, a line over the
// limit) throw std::invalid_argument (InputFileError for the file itself) naming file[:line].
//
// Expands the inputs: a file is kept as given and must be a readable regular file; a directory
// contributes its regular files with a known extension (.txt, .text, .json, .jsonl, .json.gz,
// .jsonl.gz), recursively, sorted by path (walk_tree: links not followed). What a directory
// holds that cannot be read is skipped and listed, never an error.
struct ExpandedInputs {
  std::vector<std::string> files;
  std::vector<std::pair<std::string, InputProblem>> skipped;  // path, why
};
ExpandedInputs expand_inputs(const std::vector<std::string>& inputs);

// Reads one file line by line (through gzip for is_compressed_file_name), each line at most
// limits.max_line_bytes.
class LineReader {
 public:
  LineReader(const std::string& path, int64_t max_line_bytes);
  bool next(std::string& line);  // false at the end; the line has no '\n' (nor a trailing '\r')
  int64_t line_number() const { return line_number_; }

 private:
  bool fill();
  InputFile file_;
  int64_t max_line_bytes_;
  std::vector<char> buffer_;
  size_t begin_ = 0, end_ = 0;
  bool eof_ = false;
  int64_t line_number_ = 0;
};

class DocumentReader {
 public:
  explicit DocumentReader(const std::string& path, const TextLimits& limits = {});
  // Next non-empty document; false at the end. Throws naming file:line on malformed JSON.
  bool next(std::string& document);

 private:
  bool read_next();
  std::string path_;
  DocumentFormat format_;
  TextLimits limits_;
  LineReader lines_;
  std::deque<std::string> pieces_;  // read (a document, or the pieces of a long one), not returned
  std::string open_;                // plain text: the paragraph being read
};

// Cuts a document into pieces of at most max_bytes, at whitespace where possible (for the
// tokenizer trainer, which skips longer "sentences"). Linear in the document's length.
std::vector<std::string> split_for_tokenizer_training(const std::string& document,
                                                      size_t max_bytes);

}  // namespace mxablate::data
