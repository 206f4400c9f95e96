#include "mxablate/data/text_documents.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "mxablate/contract/json_file.h"

namespace mxablate::data {
namespace {

namespace fs = std::filesystem;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_known_extension(const std::string& name) {
  for (const char* ext : {".txt", ".text", ".json", ".jsonl", ".json.gz", ".jsonl.gz"})
    if (ends_with(name, ext)) return true;
  return false;
}

bool is_blank(const std::string& line) {
  for (char c : line)
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r' && c != '\f' && c != '\v') return false;
  return true;
}

}  // namespace


DocumentFormat document_format_of(const std::string& path) {
  for (const char* ext : {".json", ".jsonl", ".json.gz", ".jsonl.gz"})
    if (ends_with(path, ext)) return DocumentFormat::kJsonLines;
  return DocumentFormat::kPlainText;
}

ExpandedInputs expand_inputs(const std::vector<std::string>& inputs) {
  ExpandedInputs expanded;
  for (const auto& input : inputs) {
    std::error_code ec;
    const fs::file_status st = fs::status(input, ec);
    if (ec && ec != std::errc::no_such_file_or_directory)
      throw InputFileError(InputProblem::kUnreadable, input + ": cannot read: " + ec.message());
    if (!fs::exists(st)) throw std::invalid_argument(input + ": no such file or directory");
    if (!fs::is_directory(st)) {
      InputFile probe(input, is_compressed_file_name(input));  // a named file must be readable: refused here
      expanded.files.push_back(input);
      continue;
    }
    const TreeWalk walk = walk_tree(input, [](std::string_view name) { return is_known_extension(std::string(name)); });
    if (walk.files.empty() && walk.skipped.empty())
      throw std::invalid_argument(input +
                                  ": holds no .txt, .text, .json, .jsonl, .json.gz or .jsonl.gz file");
    for (const auto& f : walk.files) expanded.files.push_back((fs::path(input) / f.relative).string());
    for (const auto& [relative, problem] : walk.skipped)
      expanded.skipped.emplace_back((fs::path(input) / relative).string(), problem);
  }
  return expanded;
}

LineReader::LineReader(const std::string& path, int64_t max_line_bytes)
    : file_(path, is_compressed_file_name(path)),
      max_line_bytes_(max_line_bytes),
      buffer_(static_cast<size_t>(std::min<int64_t>(max_line_bytes + 1, int64_t{1} << 20))) {}

bool LineReader::fill() {
  if (eof_) return false;
  if (begin_ > 0) {  // keep the unconsumed tail at the front
    std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  if (end_ == buffer_.size()) {  // a line longer than the buffer
    if (static_cast<int64_t>(end_) > max_line_bytes_)
      throw std::invalid_argument(file_.path() + ":" + std::to_string(line_number_ + 1) +
                                  ": a line longer than " + std::to_string(max_line_bytes_) +
                                  " bytes (--max-line-bytes)");
    buffer_.resize(static_cast<size_t>(
        std::min<int64_t>(max_line_bytes_ + 1, static_cast<int64_t>(buffer_.size()) * 2)));
  }
  const size_t got = file_.read(buffer_.data() + end_, buffer_.size() - end_);
  if (got == 0) eof_ = true;
  end_ += got;
  return got > 0;
}

bool LineReader::next(std::string& line) {
  for (;;) {
    const char* start = buffer_.data() + begin_;
    const void* nl = std::memchr(start, '\n', end_ - begin_);
    if (nl) {
      const size_t len = static_cast<size_t>(static_cast<const char*>(nl) - start);
      line.assign(start, len);
      begin_ += len + 1;
      break;
    }
    if (!fill()) {
      if (begin_ == end_) return false;
      line.assign(buffer_.data() + begin_, end_ - begin_);  // last line without '\n'
      begin_ = end_;
      break;
    }
  }
  if (static_cast<int64_t>(line.size()) > max_line_bytes_)
    throw std::invalid_argument(file_.path() + ":" + std::to_string(line_number_ + 1) +
                                ": a line longer than " + std::to_string(max_line_bytes_) +
                                " bytes (--max-line-bytes)");
  if (!line.empty() && line.back() == '\r') line.pop_back();
  ++line_number_;
  return true;
}

DocumentReader::DocumentReader(const std::string& path, const TextLimits& limits)
    : path_(path), format_(document_format_of(path)), limits_(limits), lines_(path, limits.max_line_bytes) {}

bool DocumentReader::next(std::string& document) {
  while (pieces_.empty())
    if (!read_next()) return false;
  document = std::move(pieces_.front());
  pieces_.pop_front();
  return true;
}

// Reads on until at least one document (or piece of one) is queued; false at the end.
bool DocumentReader::read_next() {
  std::string line;
  const auto queue = [this](std::string text) {
    for (auto& piece : split_into_documents(std::move(text), limits_))
      if (!is_blank(piece)) pieces_.push_back(std::move(piece));
  };
  if (format_ == DocumentFormat::kJsonLines) {
    while (lines_.next(line)) {
      if (is_blank(line)) continue;
      const std::string where = path_ + ":" + std::to_string(lines_.line_number());
      // The one JSON reader (contract/json_file.h): a number beyond a double, invalid UTF-8 or
      // deep nesting is one line naming the file, line and key, as bad input.
      nlohmann::json j;
      try {
        j = contract::parse_json_text(line, where);
      } catch (const contract::JsonFileError& e) {
        throw std::invalid_argument(e.what());
      }
      line.clear();
      line.shrink_to_fit();
      if (!j.is_object()) throw std::invalid_argument(where + ": not a JSON object");
      const auto text = j.find("text");
      if (text == j.end() || !text->is_string())
        throw std::invalid_argument(where + ": no string field \"text\"");
      queue(std::move(text->get_ref<std::string&>()));
      if (!pieces_.empty()) return true;
    }
    return false;
  }
  // Plain text: the paragraph being built lives in `open_` between calls.
  while (lines_.next(line)) {
    if (is_blank(line)) {
      if (!open_.empty()) {
        queue(std::move(open_));
        open_.clear();
        if (!pieces_.empty()) return true;
      }
      continue;
    }
    if (!open_.empty()) open_.push_back(' ');
    open_ += line;
    if (open_.size() > limits_.max_document_bytes) {
      // Cut now, keeping the last piece open: the paragraph goes on in the next lines.
      std::vector<std::string> pieces = split_into_documents(std::move(open_), limits_);
      open_ = std::move(pieces.back());
      pieces.pop_back();
      for (auto& piece : pieces)
        if (!is_blank(piece)) pieces_.push_back(std::move(piece));
      if (!pieces_.empty()) return true;
    }
  }
  if (open_.empty()) return false;
  queue(std::move(open_));
  open_.clear();
  return !pieces_.empty();
}

std::vector<std::string> split_for_tokenizer_training(const std::string& document,
                                                      size_t max_bytes) {
  std::vector<std::string> pieces;
  size_t pos = 0;
  while (pos < document.size()) {
    size_t end = std::min(document.size(), pos + max_bytes);
    if (end < document.size()) {
      // The last whitespace in (pos, end]: searched in the window only, so a document without
      // whitespace costs linear time, not quadratic.
      size_t cut = end;
      while (cut > pos && document[cut] != ' ' && document[cut] != '\n' && document[cut] != '\t') --cut;
      if (cut > pos) {
        end = cut;
      } else {  // no whitespace: cut at a UTF-8 character boundary, where the window holds one
        size_t boundary = end;
        while (boundary > pos && (static_cast<unsigned char>(document[boundary]) & 0xC0) == 0x80)
          --boundary;
        // A window of continuation bytes alone is not UTF-8 and has no boundary: cut it at
        // max_bytes (backing off to pos would cut nothing, and never end).
        if (boundary > pos) end = boundary;
      }
    }
    std::string piece = document.substr(pos, end - pos);
    if (!is_blank(piece)) pieces.push_back(std::move(piece));
    pos = end;
    while (pos < document.size() && (document[pos] == ' ' || document[pos] == '\n' ||
                                     document[pos] == '\t'))
      ++pos;
  }
  return pieces;
}

}  // namespace mxablate::data
