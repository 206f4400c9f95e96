#include "mxablate/contract/event_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

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

// A complete line is an event when it parses to an object with an integer seq and a kind.
bool parse_event(const std::string& line, json& out) {
  try {
    out = json::parse(line);
  } catch (const json::parse_error&) {
    return false;
  }
  return out.is_object() && out.contains("seq") && out["seq"].is_number_integer() &&
         out.contains("kind") && out["kind"].is_string();
}

// Scans an existing log: the byte length of its complete lines and the last seq among them.
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
  while (std::getline(in, line)) {
    if (in.eof()) break;  // no newline after it: a torn tail
    pos += static_cast<int64_t>(line.size()) + 1;
    log.complete_bytes = pos;
    json ev;
    if (parse_event(line, ev)) log.last_seq = std::max(log.last_seq, ev["seq"].get<int64_t>());
  }
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

EventReader::EventReader(std::string path, int64_t start_offset)
    : path_(std::move(path)), offset_(start_offset) {}

EventReader::Batch EventReader::poll() {
  Batch batch;
  std::ifstream in(path_, std::ios::binary);
  if (!in) return batch;
  in.seekg(offset_);
  if (!in) return batch;
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // torn or still being written: read it next time
    offset_ += static_cast<int64_t>(line.size()) + 1;
    if (line.empty()) continue;
    json ev;
    if (parse_event(line, ev)) {
      batch.events.push_back(std::move(ev));
    } else {
      ++batch.malformed_lines;
    }
  }
  return batch;
}

std::vector<json> read_effective_events(const std::string& path) {
  EventReader reader(path);
  std::vector<json> events = reader.poll().events;
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
