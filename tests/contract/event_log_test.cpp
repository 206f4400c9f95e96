// The event log: seq continues across reopen, torn lines are tolerated, resume drops the lost
// timeline.
#include <filesystem>
#include <fstream>

#include "catch.h"
#include "mxablate/contract/event_log.h"

using namespace mxablate::contract;
using nlohmann::json;

namespace {

struct TempLog {
  std::filesystem::path dir;
  std::string path;
  TempLog() {
    dir = std::filesystem::temp_directory_path() /
          ("mxablate_event_log_test_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    path = (dir / "events.jsonl").string();
  }
  ~TempLog() { std::filesystem::remove_all(dir); }
};

std::vector<int64_t> seqs(const std::vector<json>& events) {
  std::vector<int64_t> out;
  for (const auto& e : events) out.push_back(e["seq"].get<int64_t>());
  return out;
}

}  // namespace

TEST_CASE("events get increasing seq numbers that continue after reopening") {
  TempLog log;
  {
    EventWriter w(log.path);
    CHECK(w.append(event_kind::kRunStart, {{"step", 0}, {"tokens", 0}}) == 1);
    CHECK(w.append(event_kind::kEval, {{"step", 10}, {"tokens", 100}, {"val_loss", 4.5}}, true) == 2);
  }
  {
    EventWriter w(log.path);
    CHECK(w.last_seq() == 2);
    CHECK(w.append(event_kind::kRunEnd,
                   {{"status", run_status::kConverged}, {"step", 10}, {"tokens", 100}}) == 3);
  }
  EventReader r(log.path);
  const auto batch = r.poll();
  REQUIRE(batch.events.size() == 3);
  CHECK(batch.events[1]["kind"] == "eval");
  CHECK(batch.events[1]["val_loss"] == 4.5);
  CHECK(batch.events[2]["status"] == "converged");
  CHECK(batch.events[0].contains("time"));
}

TEST_CASE("the reader never consumes a torn last line, and picks it up once completed") {
  TempLog log;
  std::ofstream(log.path) << R"({"seq":1,"kind":"train","time":1,"step":1,"tokens":1,"loss":3})"
                          << "\n"
                          << R"({"seq":2,"kind":"tr)";
  EventReader r(log.path);
  auto batch = r.poll();
  CHECK(seqs(batch.events) == std::vector<int64_t>{1});
  const int64_t offset = r.offset();
  CHECK(r.poll().events.empty());
  std::ofstream(log.path, std::ios::app) << R"(ain","time":2,"step":2,"tokens":2,"loss":3})" << "\n";
  batch = r.poll();
  CHECK(seqs(batch.events) == std::vector<int64_t>{2});
  CHECK(r.offset() > offset);
  CHECK(EventReader(log.path, 0).poll().events.size() == 2);
}

TEST_CASE("reopening a log with a torn tail truncates it and continues the sequence") {
  TempLog log;
  std::ofstream(log.path) << R"({"seq":1,"kind":"train","time":1,"step":1,"tokens":1,"loss":3})"
                          << "\n"
                          << R"({"seq":2,"kind":"eval","time":1,"step":2,"tokens":2,"val_loss":3})"
                          << "\n"
                          << R"({"seq":3,"ki)";
  {
    EventWriter w(log.path);
    CHECK(w.last_seq() == 2);
    w.append(event_kind::kTrain, {{"step", 3}, {"tokens", 3}, {"loss", 2.0}});
  }
  const auto batch = EventReader(log.path).poll();
  CHECK(seqs(batch.events) == std::vector<int64_t>{1, 2, 3});
  CHECK(batch.bad_lines.empty());
}

TEST_CASE("complete lines that are not events are counted and skipped") {
  TempLog log;
  std::ofstream(log.path) << "garbage\n"
                          << R"({"kind":"train"})" << "\n"
                          << R"({"seq":1,"kind":"train","time":1,"step":1,"tokens":1,"loss":3})"
                          << "\n";
  const auto batch = EventReader(log.path).poll();
  CHECK(seqs(batch.events) == std::vector<int64_t>{1});
  REQUIRE(batch.bad_lines.size() == 2);
  CHECK(batch.bad_lines[0].line == 1);
  CHECK(batch.bad_lines[1].line == 2);
  CHECK(batch.bad_lines[1].reason == "missing field 'seq'");
  CHECK(EventReader(log.path + ".missing").poll().events.empty());
}

TEST_CASE("a resume event discards the events of the lost timeline") {
  TempLog log;
  {
    EventWriter w(log.path);
    const auto at = [](int64_t step, json more = json::object()) {
      more["step"] = step;
      more["tokens"] = step * 10;
      return more;
    };
    w.append(event_kind::kRunStart, at(0));                                   // 1
    w.append(event_kind::kEval, at(10, {{"val_loss", 4.0}}));                 // 2
    w.append(event_kind::kCheckpoint, at(10, {{"path", "c"}}));               // 3
    w.append(event_kind::kEval, at(20, {{"val_loss", 3.0}}));                 // 4: lost in the crash
    w.append(event_kind::kResume, at(10, {{"discard_after_seq", 3}}));        // 5
    w.append(event_kind::kEval, at(20, {{"val_loss", 3.1}}));                 // 6
  }
  CHECK(seqs(read_effective_events(log.path)) == std::vector<int64_t>{1, 2, 3, 5, 6});
}
