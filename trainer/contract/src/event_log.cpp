#include "mxablate/contract/event_log.h"

#include "mxablate/contract/json_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace mxablate::contract {
namespace {

using nlohmann::json;

std::string errno_text() { return std::strerror(errno); }

double unix_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

// Scans an existing log: the byte length of its complete lines and the seq of the last line a
// reader accepts as an event (parse_event_line), so the next event always follows it.
struct ExistingLog {
  int64_t complete_bytes = 0;
  int64_t last_seq = 0;
};

ExistingLog scan_existing(const std::string& path) {
  ExistingLog log;
  std::ifstream in(path, std::ios::binary);
  if (!in) return log;
  std::string line;
  int64_t pos = 0;
  EventLineState state;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // no newline after it: a torn tail
    pos += static_cast<int64_t>(line.size()) + 1;
    log.complete_bytes = pos;
    parse_event_line(line, state);
  }
  log.last_seq = state.last_seq;
  return log;
}

}  // namespace

EventWriter::EventWriter(const std::string& path) : path_(path) {
  const ExistingLog existing = scan_existing(path);
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && st.st_size > existing.complete_bytes) {
    // A crash left half a line: drop it so the next event starts on a fresh line.
    if (::truncate(path.c_str(), existing.complete_bytes) != 0)
      throw std::runtime_error(path + ": cannot truncate a torn last line: " + errno_text());
  }
  last_seq_ = existing.last_seq;
  file_ = std::fopen(path.c_str(), "ab");
  if (!file_) throw std::runtime_error(path + ": cannot open the event log: " + errno_text());
}

EventWriter::~EventWriter() {
  if (file_) {
    std::fflush(file_);
    ::fsync(fileno(file_));
    std::fclose(file_);
  }
}

int64_t EventWriter::append(const std::string& kind, json fields, bool durable) {
  if (!fields.is_object()) fields = json::object();
  json ev = json::object();
  ev["seq"] = last_seq_ + 1;
  ev["kind"] = kind;
  ev["time"] = unix_seconds();
  for (auto& item : fields.items()) ev[item.key()] = std::move(item.value());
  // A path or reason with bytes that are not UTF-8 is written with U+FFFD in their place: an
  // event is never lost to its text.
  const std::string line = ev.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size())
    throw std::runtime_error(path_ + ": cannot append an event: " + errno_text());
  ++last_seq_;
  if (durable) sync();
  return last_seq_;
}

void EventWriter::sync() {
  if (std::fflush(file_) != 0 || ::fsync(fileno(file_)) != 0)
    throw std::runtime_error(path_ + ": cannot flush the event log: " + errno_text());
}

namespace {

constexpr uint64_t kFnvBasis = 0xcbf29ce484222325ull;

uint64_t fnv1a(uint64_t h, const char* data, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    h ^= static_cast<unsigned char>(data[i]);
    h *= 0x100000001b3ull;
  }
  return h;
}

struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// pread until `n` bytes or end of file; returns the bytes read (-1 on error).
ssize_t read_at(int fd, char* buf, size_t n, int64_t at) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, buf + got, n - got, static_cast<off_t>(at + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return static_cast<ssize_t>(got);
}

std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

uint64_t unhex(const json& j) {
  if (!j.is_string() || j.get_ref<const std::string&>().size() != 16)
    throw std::invalid_argument("a hash is not 16 hex digits");
  size_t used = 0;
  const uint64_t v = std::stoull(j.get<std::string>(), &used, 16);
  if (used != 16) throw std::invalid_argument("a hash is not 16 hex digits");
  return v;
}

}  // namespace

json LogPosition::to_json() const {
  return {{"offset", offset},
          {"lines", lines},
          {"last_seq", state.last_seq},
          {"step_floor", state.step_floor},
          {"tokens_floor", state.tokens_floor},
          {"prefix_fnv", hex(prefix_hash)},
          {"tail_fnv", hex(tail_hash)},
          {"tail_bytes", tail_bytes},
          {"device", device},
          {"inode", inode}};
}

LogPosition LogPosition::from_json(const json& j) {
  // Numbers by json_file.h's rules: a float or an integer beyond its type is refused (the caller
  // then adopts the offset alone), never converted with undefined behaviour.
  const auto field = [&j](const char* key, auto& out) {
    if (const std::string why = json_to(j.at(key), out); !why.empty())
      throw std::invalid_argument(std::string(key) + ": " + why);
  };
  try {
    LogPosition p;
    field("offset", p.offset);
    field("lines", p.lines);
    field("last_seq", p.state.last_seq);
    field("step_floor", p.state.step_floor);
    field("tokens_floor", p.state.tokens_floor);
    p.prefix_hash = unhex(j.at("prefix_fnv"));
    p.tail_hash = unhex(j.at("tail_fnv"));
    field("tail_bytes", p.tail_bytes);
    field("device", p.device);
    field("inode", p.inode);
    if (p.offset < 0 || p.lines < 0 || p.tail_bytes < 0 || p.tail_bytes > p.offset)
      throw std::invalid_argument("negative or inconsistent sizes");
    return p;
  } catch (const json::exception& e) {
    throw std::invalid_argument(e.what());
  }
}

EventReader::EventReader(std::string path, LogPosition start)
    : path_(std::move(path)), pos_(start) {}

EventReader::EventReader(std::string path, int64_t start_offset) : path_(std::move(path)) {
  pos_.offset = std::max<int64_t>(0, start_offset);
  pos_.hashes_known = pos_.offset == 0;
}

// Compares the file with what was consumed of it. Cheap on the common path (same file, not
// shorter: the last consumed line is compared); the whole consumed prefix is hashed once per
// process and whenever the file's identity changed.
std::optional<std::string> EventReader::identity_mismatch(int fd, int64_t size, uint64_t device,
                                                          uint64_t inode) {
  if (size < pos_.offset)
    return "is shorter (" + std::to_string(size) + " bytes) than the " +
           std::to_string(pos_.offset) + " bytes already ingested from it";
  const bool same_file = device == pos_.device && inode == pos_.inode;
  std::vector<char> buf(size_t{1} << 16);
  if (verified_ && same_file && pos_.hashes_known) {
    // In fixed-size pieces: the last line may be an overlong one that was skipped.
    uint64_t h = kFnvBasis;
    for (int64_t at = pos_.offset - pos_.tail_bytes; at < pos_.offset;) {
      const auto want = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(buf.size()), pos_.offset - at));
      if (read_at(fd, buf.data(), want, at) != static_cast<ssize_t>(want)) return "cannot be read back";
      h = fnv1a(h, buf.data(), want);
      at += static_cast<int64_t>(want);
    }
    if (h != pos_.tail_hash)
      return "was rewritten: line " + std::to_string(pos_.lines) + " is not the one ingested";
    return std::nullopt;
  }
  uint64_t h = kFnvBasis, tail = kFnvBasis;
  int64_t lines = 0, tail_bytes = 0;
  for (int64_t at = 0; at < pos_.offset;) {
    const auto want = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(buf.size()), pos_.offset - at));
    if (read_at(fd, buf.data(), want, at) != static_cast<ssize_t>(want)) return "cannot be read back";
    h = fnv1a(h, buf.data(), want);
    for (size_t i = 0; i < want; ++i) {
      tail = fnv1a(tail, buf.data() + i, 1);
      ++tail_bytes;
      if (buf[i] == '\n') {
        ++lines;
        if (at + static_cast<int64_t>(i) + 1 < pos_.offset) tail = kFnvBasis, tail_bytes = 0;
      }
    }
    at += static_cast<int64_t>(want);
  }
  if (pos_.offset > 0 && tail_bytes == 0) return "cannot be read back";
  if (pos_.hashes_known && h != pos_.prefix_hash)
    return "was replaced: its first " + std::to_string(pos_.offset) +
           " bytes are not the ones ingested";
  if (!pos_.hashes_known) {
    // An offset from an older store: adopt the file, provided the offset is a line boundary.
    char last = 0;
    if (pos_.offset > 0 && (read_at(fd, &last, 1, pos_.offset - 1) != 1 || last != '\n'))
      return "does not end a line at the " + std::to_string(pos_.offset) +
             " bytes already ingested";
    pos_.prefix_hash = h;
    pos_.tail_hash = tail;
    pos_.tail_bytes = tail_bytes;
    pos_.lines = lines;
    pos_.hashes_known = true;
  }
  verified_ = true;
  return std::nullopt;
}

EventReader::Batch EventReader::poll() {
  Batch batch;
  Fd file{::open(path_.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) {
    if (errno == ENOENT && pos_.offset > 0) {
      batch.restarted = "is gone (" + std::to_string(pos_.offset) + " bytes had been ingested)";
      pos_ = LogPosition{};
      verified_ = true;
    }
    return batch;  // other errors (permissions, I/O): nothing consumed; the next poll retries
  }
  struct stat st {};
  if (::fstat(file.fd, &st) != 0) return batch;
  const auto device = static_cast<uint64_t>(st.st_dev);
  const auto inode = static_cast<uint64_t>(st.st_ino);
  if (pos_.offset > 0 || !pos_.hashes_known) {
    if (auto why = identity_mismatch(file.fd, static_cast<int64_t>(st.st_size), device, inode)) {
      batch.restarted = std::move(*why);
      pos_ = LogPosition{};
    }
  }
  verified_ = true;
  pos_.device = device;
  pos_.inode = inode;

  // Lines are assembled from fixed-size reads; a line longer than the limit is hashed and
  // skipped without being kept, so no line can make the reader hold more than the limit.
  std::vector<char> buf(size_t{1} << 16);
  std::string line;
  bool overlong = false;
  uint64_t running = pos_.prefix_hash, line_hash = kFnvBasis;
  int64_t line_bytes = 0;
  int64_t at = pos_.offset;
  const int64_t stop_after = pos_.offset + kMaxBytesPerPoll;
  while (true) {
    const ssize_t n = read_at(file.fd, buf.data(), buf.size(), at);
    if (n <= 0) break;
    size_t begin = 0;
    for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
      if (buf[i] != '\n') continue;
      const size_t len = i + 1 - begin;
      running = fnv1a(running, buf.data() + begin, len);
      line_hash = fnv1a(line_hash, buf.data() + begin, len);
      line_bytes += static_cast<int64_t>(len);
      if (!overlong) line.append(buf.data() + begin, len - 1);
      // The line is complete: consume it.
      pos_.offset += line_bytes;
      ++pos_.lines;
      pos_.prefix_hash = running;
      pos_.tail_hash = line_hash;
      pos_.tail_bytes = line_bytes;
      if (overlong) {
        batch.bad_lines.push_back({pos_.lines, "line longer than 1 MiB"});
      } else {
        ParsedEventLine parsed = parse_event_line(line, pos_.state);
        if (parsed.event) batch.events.push_back(std::move(*parsed.event));
        else batch.bad_lines.push_back({pos_.lines, std::move(parsed.error)});
      }
      line.clear();
      overlong = false;
      line_hash = kFnvBasis;
      line_bytes = 0;
      begin = i + 1;
    }
    const size_t rest = static_cast<size_t>(n) - begin;
    running = fnv1a(running, buf.data() + begin, rest);
    line_hash = fnv1a(line_hash, buf.data() + begin, rest);
    line_bytes += static_cast<int64_t>(rest);
    if (!overlong && line.size() + rest > kMaxEventLineBytes) {
      overlong = true;
      line.clear();
      line.shrink_to_fit();
    }
    if (!overlong) line.append(buf.data() + begin, rest);
    at += n;
    if (pos_.offset >= stop_after) {
      batch.more = true;
      break;
    }
  }
  // Whatever follows the last newline is torn or still being written: read it next time.
  return batch;
}

std::vector<json> read_effective_events(const std::string& path) {
  EventReader reader(path);
  std::vector<json> events;
  for (bool more = true; more;) {
    EventReader::Batch batch = reader.poll();
    for (auto& ev : batch.events) events.push_back(std::move(ev));
    more = batch.more;
  }
  std::vector<json> kept;
  for (auto& ev : events) {
    if (ev["kind"] == event_kind::kResume && ev.contains("discard_after_seq")) {
      const int64_t keep_up_to = ev["discard_after_seq"].get<int64_t>();
      while (!kept.empty() && kept.back()["seq"].get<int64_t>() > keep_up_to) kept.pop_back();
    }
    kept.push_back(std::move(ev));
  }
  return kept;
}

}  // namespace mxablate::contract
