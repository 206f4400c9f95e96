// The one way the data commands read their input (`data prepare` and `data collect`,
// docs/design.md §4 "Reading input"): walking a tree, opening a file, reading it through gzip,
// and the limits that bound what one line and one document may cost. Each rule is decided here
// once; the commands differ only in what they do with a failure (prepare refuses a file it was
// asked to read, collect counts it and goes on).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace mxablate::data {

// Why an input could not be read. One name table (input_problem_name) serves the collect and
// composition tables, the manifests and the log lines.
enum class InputProblem {
  kUnreadable,  // permission denied, an I/O error, or a directory that cannot be listed
  kSpecial,     // not a regular file: a FIFO, socket or device, or a symbolic link met in a tree
  kDamaged,     // a compressed stream that fails its check (cut short, bad CRC or length), or a
                // file named as compressed that is not
};
inline constexpr InputProblem kAllInputProblems[] = {InputProblem::kUnreadable,
                                                     InputProblem::kSpecial, InputProblem::kDamaged};
const char* input_problem_name(InputProblem problem);

// A name that says the file is gzip-compressed (.gz; dictzip's .dz is gzip too): read through
// gzip, verified, by both commands.
inline constexpr std::string_view kCompressedSuffixes[] = {".gz", ".dz"};
bool is_compressed_file_name(std::string_view file_name);

// An input that cannot be read: bad input (exit 2), one line naming the file and the reason.
struct InputFileError : std::invalid_argument {
  InputFileError(InputProblem problem, const std::string& message)
      : std::invalid_argument(message), problem(problem) {}
  InputProblem problem;
};

// Limits on what one input may cost (docs/design.md §4 "Reading input"). Defaults:
// - a line of 64 MiB holds any real JSON-lines document (a whole book is a few MiB) and bounds
//   the reader at about three times that (the line, its parsed text, the cut pieces);
// - a document of 1 MiB (cut into pieces of a quarter of that) is what collect always cut at, and
//   bounds a tokenizer worker: SentencePiece holds about 100-200 bytes per byte it encodes;
// - a whitespace-free run of 4 KiB is longer than any word; longer runs (base64, minified data)
//   are encoded as pieces of that size, which keeps encoding linear in the input.
struct TextLimits {
  int64_t max_line_bytes = int64_t{64} << 20;
  size_t max_document_bytes = size_t{1} << 20;
  size_t max_run_bytes = 4096;
  size_t document_chunk_bytes() const { return max_document_bytes / 4; }
};
// "--max-line-bytes"/"--max-document-bytes" as given: std::invalid_argument naming the option.
void validate_text_limits(const TextLimits& limits);

// Cuts a text longer than limits.max_document_bytes into pieces of at most
// document_chunk_bytes(), at the last blank line before the limit, else the last line break,
// else the last space or tab, else a UTF-8 character boundary; a shorter text is one piece. No
// byte is lost: the pieces concatenate to the text.
std::vector<std::string> split_into_documents(std::string text, const TextLimits& limits);

// The segments a document is encoded in: the document itself, unless it holds a run of more
// than limits.max_run_bytes bytes without whitespace, which is cut every max_run_bytes (at a
// UTF-8 boundary). The segments concatenate to the document.
std::vector<std::string_view> encoding_segments(std::string_view document, const TextLimits& limits);

// What walking a directory found: its regular files with the names `wanted` accepts, sorted by
// relative path, and every entry that could not be taken, by problem. Symbolic links are never
// followed (a link out of the tree would pull in other files, or loop); they count as kSpecial
// when their name is wanted. A directory that cannot be listed counts as kUnreadable.
struct TreeEntry {
  std::string relative;  // generic form, relative to the walked directory
  int64_t bytes = 0;
};
struct TreeWalk {
  std::vector<TreeEntry> files;
  std::vector<std::pair<std::string, InputProblem>> skipped;  // relative path, why
};
TreeWalk walk_tree(const std::filesystem::path& dir,
                   const std::function<bool(std::string_view file_name)>& wanted);

// The bytes of one input file, verified: a file whose name says gzip (.gz, .dz) must be gzip
// to its end (each member's CRC and length checked, a stream cut short is damage). Throws
// InputFileError naming the file.
class InputFile {
 public:
  InputFile(const std::filesystem::path& path, bool compressed);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  // Up to n bytes into out; 0 at the verified end.
  size_t read(char* out, size_t n);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  void* gz_ = nullptr;  // gzFile
  std::FILE* file_ = nullptr;
  bool checked_format_ = false;
};

// A file's whole text if it is at most `limit` bytes (after decompression); else too_large.
struct WholeText {
  std::string text;
  bool too_large = false;
};
WholeText read_whole(const std::filesystem::path& path, bool compressed, int64_t limit);

}  // namespace mxablate::data
