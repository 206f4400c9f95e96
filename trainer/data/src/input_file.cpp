#include "mxablate/data/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#ifdef MXABLATE_HAVE_ZLIB
#include <zlib.h>
#endif

namespace mxablate::data {
namespace {

namespace fs = std::filesystem;

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// Back from `end` to a UTF-8 character boundary, never below pos + 1 (a piece is never empty).
size_t utf8_boundary(std::string_view s, size_t pos, size_t end) {
  while (end > pos + 1 && end < s.size() && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;
  return end;
}

// Why a path cannot be opened for reading, from what stat says of it (errno from open otherwise).
InputFileError open_error(const std::string& path, int err) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
    return {InputProblem::kSpecial, path + ": not a regular file (a FIFO, socket or device)"};
  return {InputProblem::kUnreadable, path + ": cannot open: " + std::strerror(err)};
}

}  // namespace

bool is_compressed_file_name(std::string_view name) {
  for (const std::string_view suffix : kCompressedSuffixes)
    if (name.size() > suffix.size() && name.substr(name.size() - suffix.size()) == suffix) return true;
  return false;
}

const char* input_problem_name(InputProblem problem) {
  switch (problem) {
    case InputProblem::kUnreadable: return "unreadable";
    case InputProblem::kSpecial: return "special";
    case InputProblem::kDamaged: return "damaged";
  }
  return "unknown";
}

void validate_text_limits(const TextLimits& l) {
  if (l.max_line_bytes < 4096)
    throw std::invalid_argument("--max-line-bytes: must be >= 4096, got " + std::to_string(l.max_line_bytes));
  if (l.max_document_bytes < 4096)
    throw std::invalid_argument("--max-document-bytes: must be >= 4096, got " +
                                std::to_string(l.max_document_bytes));
}

std::vector<std::string> split_into_documents(std::string text, const TextLimits& limits) {
  std::vector<std::string> pieces;
  if (text.size() <= limits.max_document_bytes) {
    pieces.push_back(std::move(text));
    return pieces;
  }
  const size_t chunk = limits.document_chunk_bytes();
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = pos + chunk;
    if (end >= text.size()) {
      end = text.size();
    } else {
      const std::string_view window(text.data() + pos, end - pos);
      size_t cut = window.rfind("\n\n");
      if (cut != std::string_view::npos && cut > 0) {
        end = pos + cut + 2;
      } else if ((cut = window.rfind('\n')) != std::string_view::npos && cut > 0) {
        end = pos + cut + 1;
      } else if ((cut = window.find_last_of(" \t")) != std::string_view::npos && cut > 0) {
        end = pos + cut + 1;
      } else {
        end = utf8_boundary(text, pos, end);
      }
    }
    pieces.push_back(text.substr(pos, end - pos));
    pos = end;
  }
  return pieces;
}

std::vector<std::string_view> encoding_segments(std::string_view document, const TextLimits& limits) {
  std::vector<std::string_view> segments;
  size_t start = 0;  // of the current segment
  size_t run = 0;    // length of the whitespace-free run ending at i
  for (size_t i = 0; i < document.size(); ++i) {
    if (is_space(document[i])) {
      run = 0;
      continue;
    }
    // A cut before byte i when the run would pass the limit and i starts a character.
    if (run >= limits.max_run_bytes && (static_cast<unsigned char>(document[i]) & 0xC0) != 0x80) {
      segments.push_back(document.substr(start, i - start));
      start = i;
      run = 0;
    }
    ++run;
  }
  segments.push_back(document.substr(start));
  return segments;
}

TreeWalk walk_tree(const fs::path& dir, const std::function<bool(std::string_view)>& wanted) {
  TreeWalk walk;
  std::vector<fs::path> pending{fs::path()};  // relative directories still to list
  while (!pending.empty()) {
    const fs::path rel = pending.back();
    pending.pop_back();
    std::error_code ec;
    fs::directory_iterator it(dir / rel, ec);
    if (ec) {
      walk.skipped.emplace_back(rel.empty() ? std::string(".") : rel.generic_string(),
                                InputProblem::kUnreadable);
      continue;
    }
    for (; it != fs::directory_iterator(); it.increment(ec)) {
      const fs::path child = rel / it->path().filename();
      const fs::file_status st = it->symlink_status(ec);
      if (ec) {
        walk.skipped.emplace_back(child.generic_string(), InputProblem::kUnreadable);
        continue;
      }
      if (fs::is_directory(st)) {
        pending.push_back(child);
        continue;
      }
      if (!wanted(it->path().filename().string())) continue;
      if (!fs::is_regular_file(st)) {
        walk.skipped.emplace_back(child.generic_string(), InputProblem::kSpecial);
        continue;
      }
      if (::access(it->path().c_str(), R_OK) != 0) {
        walk.skipped.emplace_back(child.generic_string(), InputProblem::kUnreadable);
        continue;
      }
      const auto size = it->file_size(ec);
      walk.files.push_back({child.generic_string(), ec ? 0 : static_cast<int64_t>(size)});
    }
    // A listing that broke off midway ends the loop as if complete, with the increment's error
    // (the body's own errors are cleared by the next increment): what was listed stands, the
    // directory counts as unreadable.
    if (ec)
      walk.skipped.emplace_back(rel.empty() ? std::string(".") : rel.generic_string(), InputProblem::kUnreadable);
  }
  std::sort(walk.files.begin(), walk.files.end(),
            [](const TreeEntry& a, const TreeEntry& b) { return a.relative < b.relative; });
  std::sort(walk.skipped.begin(), walk.skipped.end());
  return walk;
}

InputFile::InputFile(const fs::path& path, bool compressed) : path_(path.string()) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; the check below refuses it.
  const int fd = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw open_error(path_, errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    if (S_ISDIR(st.st_mode)) throw InputFileError(InputProblem::kSpecial, path_ + ": is a directory");
    throw InputFileError(InputProblem::kSpecial, path_ + ": not a regular file (a FIFO, socket or device)");
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  if (compressed) {
#ifdef MXABLATE_HAVE_ZLIB
    gz_ = gzdopen(fd, "rb");
    if (!gz_) {
      ::close(fd);
      throw InputFileError(InputProblem::kUnreadable, path_ + ": cannot open: out of memory");
    }
    gzbuffer(static_cast<gzFile>(gz_), 1 << 20);
#else
    ::close(fd);
    throw InputFileError(InputProblem::kDamaged,
                         path_ + ": this build has no zlib, so compressed inputs cannot be read");
#endif
  } else {
    file_ = ::fdopen(fd, "rb");
    if (!file_) {
      ::close(fd);
      throw InputFileError(InputProblem::kUnreadable, path_ + ": cannot open: " + std::strerror(errno));
    }
  }
}

InputFile::~InputFile() {
#ifdef MXABLATE_HAVE_ZLIB
  if (gz_) gzclose(static_cast<gzFile>(gz_));
#endif
  if (file_) std::fclose(file_);
}

size_t InputFile::read(char* out, size_t n) {
  if (n == 0) return 0;
#ifdef MXABLATE_HAVE_ZLIB
  if (gz_) {
    const auto gz = static_cast<gzFile>(gz_);
    const int got = gzread(gz, out, static_cast<unsigned>(std::min<size_t>(n, 1u << 30)));
    // zlib reads a file that is not gzip as it is ("transparent" mode): a file named .gz that
    // is not compressed claims what it is not.
    if (!checked_format_) {
      checked_format_ = true;
      if (got >= 0 && gzdirect(gz))
        throw InputFileError(InputProblem::kDamaged, path_ + ": named as gzip-compressed but is not gzip");
    }
    int err = Z_OK;
    std::string message = gzerror(gz, &err);
    // zlib prefixes its message with the stream's name, "<fd:N>" for a descriptor: ours is the path.
    if (const size_t colon = message.find(": "); message.rfind("<fd:", 0) == 0 && colon != std::string::npos)
      message.erase(0, colon + 2);
    // A stream cut short ends like a complete one and says so only through gzerror
    // (Z_BUF_ERROR: "unexpected end of file"); a bad CRC or length is Z_DATA_ERROR.
    if (got < 0 || (err != Z_OK && err != Z_STREAM_END))
      throw InputFileError(InputProblem::kDamaged,
                           path_ + ": damaged gzip stream: " + (message.empty() ? "unknown error" : message) +
                               " (cut short or corrupt; `gzip -t` says the same)");
    return static_cast<size_t>(got);
  }
#endif
  const size_t got = std::fread(out, 1, n, file_);
  if (got == 0 && std::ferror(file_))
    throw InputFileError(InputProblem::kUnreadable, path_ + ": read error: " + std::strerror(errno));
  return got;
}

WholeText read_whole(const fs::path& path, bool compressed, int64_t limit) {
  WholeText r;
  InputFile in(path, compressed);
  std::vector<char> buffer(1 << 16);
  for (;;) {
    const size_t got = in.read(buffer.data(), buffer.size());
    if (got == 0) break;
    r.text.append(buffer.data(), got);
    if (static_cast<int64_t>(r.text.size()) > limit) {
      r.text.clear();
      r.text.shrink_to_fit();
      r.too_large = true;
      break;
    }
  }
  return r;
}

}  // namespace mxablate::data
