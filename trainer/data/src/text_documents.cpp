#include "mxablate/data/text_documents.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "mxablate/contract/json_file.h"

#ifdef MXABLATE_HAVE_ZLIB
#include <zlib.h>
#endif

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
    if (c != ' ' && c != '\t' && c != '\r' && c != '\f' && c != '\v') return false;
  return true;
}

}  // namespace

bool is_gzip_path(const std::string& path) { return ends_with(path, ".gz"); }

DocumentFormat document_format_of(const std::string& path) {
  for (const char* ext : {".json", ".jsonl", ".json.gz", ".jsonl.gz"})
    if (ends_with(path, ext)) return DocumentFormat::kJsonLines;
  return DocumentFormat::kPlainText;
}

std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const auto& input : inputs) {
    std::error_code ec;
    const fs::file_status st = fs::status(input, ec);
    if (ec || !fs::exists(st)) throw std::invalid_argument(input + ": no such file or directory");
    if (fs::is_directory(st)) {
      std::vector<std::string> found;
      for (const auto& entry : fs::recursive_directory_iterator(input))
        if (entry.is_regular_file() && is_known_extension(entry.path().filename().string()))
          found.push_back(entry.path().string());
      if (found.empty())
        throw std::invalid_argument(input +
                                 ": holds no .txt, .text, .json, .jsonl, .json.gz or .jsonl.gz file");
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else {
      files.push_back(input);
    }
  }
  return files;
}

LineReader::LineReader(const std::string& path) : path_(path), buffer_(1 << 20) {
  if (is_gzip_path(path)) {
#ifdef MXABLATE_HAVE_ZLIB
    gz_ = gzopen(path.c_str(), "rb");
    if (!gz_) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
    gzbuffer(static_cast<gzFile>(gz_), 1 << 20);
#else
    throw std::runtime_error(path + ": this build has no zlib, so .gz inputs cannot be read");
#endif
  } else {
    file_ = std::fopen(path.c_str(), "rb");
    if (!file_) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
  }
}

LineReader::~LineReader() {
#ifdef MXABLATE_HAVE_ZLIB
  if (gz_) gzclose(static_cast<gzFile>(gz_));
#endif
  if (file_) std::fclose(file_);
}

bool LineReader::fill() {
  if (eof_) return false;
  if (begin_ > 0) {  // keep the unconsumed tail at the front
    std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  if (end_ == buffer_.size()) buffer_.resize(buffer_.size() * 2);  // a line longer than the buffer
  long got = 0;
#ifdef MXABLATE_HAVE_ZLIB
  if (gz_) {
    got = gzread(static_cast<gzFile>(gz_), buffer_.data() + end_,
                 static_cast<unsigned>(buffer_.size() - end_));
    if (got < 0) {
      int code = 0;
      const char* msg = gzerror(static_cast<gzFile>(gz_), &code);
      throw std::runtime_error(path_ + ": gzip error: " + (msg ? msg : "unknown"));
    }
  }
#endif
  if (file_) {
    got = static_cast<long>(std::fread(buffer_.data() + end_, 1, buffer_.size() - end_, file_));
    if (std::ferror(file_)) throw std::runtime_error(path_ + ": read error");
  }
  if (got == 0) eof_ = true;
  end_ += static_cast<size_t>(got);
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
  if (!line.empty() && line.back() == '\r') line.pop_back();
  ++line_number_;
  return true;
}

DocumentReader::DocumentReader(const std::string& path)
    : path_(path), format_(document_format_of(path)), lines_(path) {}

bool DocumentReader::next(std::string& document) {
  std::string line;
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
      if (!j.is_object()) throw std::invalid_argument(where + ": not a JSON object");
      const auto text = j.find("text");
      if (text == j.end() || !text->is_string())
        throw std::invalid_argument(where + ": no string field \"text\"");
      document = text->get<std::string>();
      if (!is_blank(document)) return true;
    }
    return false;
  }
  document.clear();
  while (lines_.next(line)) {
    if (is_blank(line)) {
      if (!document.empty()) return true;
      continue;
    }
    if (!document.empty()) document.push_back(' ');
    document += line;
  }
  return !document.empty();
}

std::vector<std::string> split_for_tokenizer_training(const std::string& document,
                                                      size_t max_bytes) {
  std::vector<std::string> pieces;
  size_t pos = 0;
  while (pos < document.size()) {
    size_t end = std::min(document.size(), pos + max_bytes);
    if (end < document.size()) {
      size_t cut = document.find_last_of(" \n\t", end);
      if (cut != std::string::npos && cut > pos) {
        end = cut;
      } else {  // no whitespace: cut at a UTF-8 character boundary
        while (end > pos && (static_cast<unsigned char>(document[end]) & 0xC0) == 0x80) --end;
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
