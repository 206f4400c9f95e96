// What is an event line: every field type and range, seq order, step/tokens order, sizes,
// encodings; and the reader: line numbers, partial lines, overlong lines, and recognising a log
// that was truncated, replaced (shorter or longer) or deleted after part of it was consumed.
#include <filesystem>
#include <fstream>

#include "catch.h"
#include "mxablate/contract/event_line.h"
#include "mxablate/contract/event_log.h"

using namespace mxablate::contract;
using nlohmann::json;

// Catch2 v2 and v3 name the substring matcher differently; this needs neither.
#define CHECK_CONTAINS(text, part)                          \
  do {                                                      \
    const std::string text_ = (text);                       \
    INFO("text: " << text_);                                \
    CHECK(text_.find(part) != std::string::npos);           \
  } while (0)

namespace {

std::string line(int64_t seq, const std::string& kind, json fields = json::object()) {
  json ev = {{"seq", seq}, {"kind", kind}, {"time", 1000.5}, {"step", 10}, {"tokens", 100}};
  for (auto& [k, v] : fields.items()) ev[k] = v;
  return ev.dump();
}

std::string train(int64_t seq, int64_t step, double loss = 3.0) {
  return line(seq, "train", {{"step", step}, {"tokens", step * 10}, {"loss", loss}});
}

// The reason a line is refused ("" when it is an event), after `before` was accepted.
std::string refusal(const std::string& text, EventLineState state = {}) {
  const ParsedEventLine p = parse_event_line(text, state);
  return p.event ? "" : p.error;
}

struct TempLog {
  std::filesystem::path dir;
  std::string path;
  TempLog() {
    dir = std::filesystem::temp_directory_path() /
          ("mxablate_event_line_test_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    path = (dir / "events.jsonl").string();
  }
  ~TempLog() { std::filesystem::remove_all(dir); }
  void write(const std::string& text, bool append = false) const {
    std::ofstream(path, append ? std::ios::app | std::ios::binary : std::ios::binary) << text;
  }
};

std::vector<int64_t> seqs(const std::vector<json>& events) {
  std::vector<int64_t> out;
  for (const auto& e : events) out.push_back(e["seq"].get<int64_t>());
  return out;
}

}  // namespace

TEST_CASE("every kind the trainer writes is an event, with null measurements") {
  EventLineState s;
  const std::vector<std::string> lines{
      line(1, "run_start", {{"step", 0}, {"tokens", 0}, {"attempt", 1}, {"device", "cpu"},
                            {"params", 123}, {"resumed", false}, {"versions", {{"x", "1"}}}}),
      line(2, "train", {{"loss", nullptr}, {"lr", 0.001}, {"grad_norm", nullptr}, {"tokens_per_s", 1e4}}),
      line(3, "eval", {{"val_loss", nullptr}}),
      line(4, "quant_stats", {{"layer", 0}, {"layer_name", "blocks.0"}, {"gemm", "fprop"},
                              {"operand", "a"}, {"relative_error", 0.1},
                              {"fraction_saturated", 0.0}, {"fraction_flushed", 1.0},
                              {"mean_error", -0.5}}),
      line(5, "divergence", {{"reason", "nonfinite_loss"}, {"value", nullptr}, {"severity", "fatal"}}),
      line(6, "checkpoint", {{"path", "/r/ckpt"}}),
      line(7, "resume", {{"discard_after_seq", 6}}),
      line(8, "checkpoint_rejected", {{"path", "/r/ckpt"}, {"reason", "model.pt: missing"},
                                      {"moved_to", ""}}),
      line(9, "target_reached", {{"val_loss", 3.0}}),
      line(10, "run_end", {{"status", "diverged"}, {"wall_s", 1.5}, {"tokens_per_s", nullptr},
                          {"peak_rss_bytes", 1 << 20}, {"peak_gpu_bytes", 0}, {"reason", "x"}}),
  };
  for (const auto& l : lines) {
    INFO(l);
    const ParsedEventLine p = parse_event_line(l, s);
    CHECK(p.error == "");
    CHECK(p.event.has_value());
  }
  CHECK(s.last_seq == 10);
}

TEST_CASE("quant_stats may carry occ_fraction, a fraction in [0, 1]") {
  const auto quant = [](json occ) {
    return line(1, "quant_stats", {{"layer", 0}, {"gemm", "fprop"}, {"operand", "x"},
                                   {"relative_error", 0.1}, {"occ_fraction", occ}});
  };
  for (const json& ok : {json(0.0), json(0.0125), json(1), json(nullptr)}) {
    INFO(ok.dump());
    CHECK(refusal(quant(ok)) == "");
  }
  for (const json& bad : {json(-0.001), json(1.5), json("0.1"), json(true), json::array()}) {
    INFO(bad.dump());
    CHECK_CONTAINS(refusal(quant(bad)), "field 'occ_fraction' must be a number in [0, 1] or null");
  }
}

TEST_CASE("impossible lines are refused with a reason, never returned as data") {
  struct Case {
    std::string text;
    std::string reason;
  };
  const std::vector<Case> cases{
      {"", "empty line"},
      {"not json", "not JSON"},
      {"[1,2]", "not a JSON object"},
      {R"({"kind":"train","time":1,"step":1,"tokens":1,"loss":1})", "missing field 'seq'"},
      {line(0, "eval", {{"val_loss", 1}}), "seq 0 is not an integer in [1, 2^53]"},
      {line(-3, "eval", {{"val_loss", 1}}), "seq -3 is not an integer"},
      {R"({"seq":1.5,"kind":"eval","time":1,"step":1,"tokens":1,"val_loss":1})", "seq 1.5 is not"},
      {R"({"seq":"1","kind":"eval","time":1,"step":1,"tokens":1,"val_loss":1})", "is not an integer"},
      {R"({"seq":9223372036854775807,"kind":"eval","time":1,"step":1,"tokens":1,"val_loss":1})",
       "is not an integer in [1, 2^53]"},
      {R"({"seq":18446744073709551615,"kind":"eval","time":1,"step":1,"tokens":1,"val_loss":1})",
       "is not an integer in [1, 2^53]"},
      {R"({"seq":1e999,"kind":"eval","time":1,"step":1,"tokens":1,"val_loss":1})",
       "a number does not fit a double"},
      {R"({"seq":1,"kind":"eval","time":1,"step":1,"tokens":1,"val_loss":1e999})",
       "a number does not fit a double"},
      {R"({"seq":1,"kind":"eval","time":1,"step":1,"tokens":1,"val_loss":-1e999})",
       "a number does not fit a double"},
      {R"({"seq":1,"kind":"eval","time":1,"step":1,"tokens":1,"val_loss":NaN})", "not JSON"},
      {R"({"seq":1,"kind":"eval","time":1,"step":1,"tokens":1,"val_loss":Infinity})", "not JSON"},
      {line(1, "bogus"), "unknown kind 'bogus'"},
      {line(1, "eval", {{"kind", 7}, {"val_loss", 1}}), "field 'kind' is not a string"},
      {R"({"seq":1,"time":1,"step":1,"tokens":1})", "missing field 'kind'"},
      {line(1, "eval"), "missing field 'val_loss'"},
      {line(1, "eval", {{"val_loss", "low"}}), "field 'val_loss' must be a number or null"},
      {line(1, "eval", {{"val_loss", true}}), "field 'val_loss' must be a number or null"},
      {line(1, "eval", {{"val_loss", 1}, {"time", nullptr}}), "field 'time' must be a number >= 0"},
      {line(1, "eval", {{"val_loss", 1}, {"time", -5}}), "field 'time' must be a number >= 0"},
      {line(1, "eval", {{"val_loss", 1}, {"step", -1}}), "field 'step' must be an integer in [0, 2^53], got -1"},
      {line(1, "eval", {{"val_loss", 1}, {"tokens", 2.5}}), "field 'tokens' must be an integer"},
      {line(1, "eval", {{"val_loss", 1}, {"tokens", nullptr}}), "field 'tokens' must be an integer"},
      {line(1, "eval", {{"val_loss", 1}, {"step", 1e300}}), "field 'step' must be an integer"},
      {line(1, "train", {{"loss", 1}, {"grad_norm", -1}}), "field 'grad_norm' must be a number >= 0"},
      {line(1, "train", {{"loss", 1}, {"tokens_per_s", "fast"}}), "field 'tokens_per_s' must be"},
      {line(1, "quant_stats", {{"layer", -1}, {"gemm", "fprop"}, {"operand", "a"}}), "field 'layer'"},
      {line(1, "quant_stats", {{"layer", 0}, {"gemm", ""}, {"operand", "a"}}), "field 'gemm' must be a non-empty string"},
      {line(1, "quant_stats", {{"layer", 0}, {"gemm", "f"}, {"operand", "a"}, {"fraction_flushed", 1.5}}),
       "field 'fraction_flushed' must be a number in [0, 1]"},
      {line(1, "divergence", {{"reason", "x"}, {"severity", "mild"}}), "field 'severity' must be warning or fatal"},
      {line(1, "checkpoint"), "missing field 'path'"},
      {line(1, "checkpoint", {{"path", 5}}), "field 'path' must be a non-empty string"},
      {line(3, "resume", {{"discard_after_seq", 3}}), "discard_after_seq must be below"},
      {line(3, "resume", {{"discard_after_seq", -1}}), "field 'discard_after_seq' must be an integer"},
      {line(1, "run_end", {{"status", "won"}}), "field 'status' must be converged"},
      {line(1, "run_end", {{"status", "converged"}, {"peak_rss_bytes", -5}}), "field 'peak_rss_bytes'"},
      {line(1, "run_start", {{"resumed", "yes"}}), "field 'resumed' must be true or false"},
      {line(1, "eval", {{"val_loss", 1}, {"note", std::string(5000, 'x')}}),
       "a string of 5000 bytes (at most 4096)"},
      {std::string(R"({"seq":1,"kind":"eval","time":1,"step":1,"tokens":1,"val_loss":1,"x":")") +
           "\xff\xfe" + "\"}",
       "not JSON"},
      {std::string(R"({"seq":1,"kind":"eval","time":1,"step":1,"tokens":1,"val_loss":1})") +
           std::string(1, '\0'),
       "NUL byte in the line"},
      {std::string(R"({"seq":1,"kind":"eval","time":1,"step":1,"tokens":1,"val_loss":1,"x":)") +
           std::string(100000, '[') + std::string(100000, ']') + "}",
       "nested deeper than 16 levels"},
  };
  for (const Case& c : cases) {
    INFO(c.text.substr(0, 200));
    const std::string why = refusal(c.text);
    CHECK_CONTAINS(why, (c.reason));
    // A reason is printable ASCII whatever the line held (it goes to terminals and the store).
    for (char ch : why) CHECK((ch >= 0x20 && ch < 0x7f));
  }
}

TEST_CASE("seq must increase, and curves may not go back without a resume") {
  EventLineState s;
  REQUIRE(refusal(train(5, 10), s) == "");
  s.last_seq = 5;
  s.step_floor = 10;
  s.tokens_floor = 100;
  CHECK_CONTAINS(refusal(train(5, 11), s), ("seq 5 does not follow seq 5"));
  CHECK_CONTAINS(refusal(train(4, 11), s), ("seq 4 does not follow seq 5"));
  CHECK(refusal(train(9, 11), s) == "");  // a gap: a damaged line may have had seq 6..8
  CHECK_CONTAINS(refusal(train(6, 9), s), ("go back from 10/100"));
  CHECK_CONTAINS(refusal(line(6, "eval", {{"step", 10}, {"tokens", 99}, {"val_loss", 1}}), s),
             ("go back"));
  // Lifecycle events may carry an earlier step; resume and run_start begin a new timeline.
  CHECK(refusal(line(6, "run_end", {{"status", "interrupted"}, {"step", 9}, {"tokens", 90}}), s) == "");
  EventLineState r = s;
  ParsedEventLine p = parse_event_line(line(6, "resume", {{"step", 4}, {"tokens", 40}, {"discard_after_seq", 3}}), r);
  REQUIRE(p.event);
  CHECK(r.step_floor == 4);
  CHECK(refusal(train(7, 5), r) == "");
  // A refused line changes nothing.
  EventLineState unchanged = s;
  parse_event_line(train(2, 50), unchanged);
  CHECK(unchanged.last_seq == 5);
  CHECK(unchanged.step_floor == 10);
}

TEST_CASE("the reader reports bad lines by number and skips them") {
  TempLog log;
  // (nlohmann writes an infinite double as null, so the overflowing literal is put in by hand)
  std::string text = train(1, 1) + "\n{oops\n" + train(1, 2) + "\n" +
                     R"({"seq":3,"kind":"eval","time":1,"step":2,"tokens":20,"val_loss":1e999})" +
                     "\n" + train(4, 3) + "\n";
  log.write(text);
  EventReader r(log.path);
  const auto batch = r.poll();
  CHECK(seqs(batch.events) == std::vector<int64_t>{1, 4});
  REQUIRE(batch.bad_lines.size() == 3);
  CHECK(batch.bad_lines[0].line == 2);
  CHECK(batch.bad_lines[1].line == 3);
  CHECK_CONTAINS(batch.bad_lines[1].reason, ("seq 1 does not follow seq 1"));
  CHECK(batch.bad_lines[2].line == 4);
  CHECK(batch.bad_lines[2].reason == "a number does not fit a double");
  CHECK(r.offset() == static_cast<int64_t>(text.size()));
  CHECK(r.position().lines == 5);
}

TEST_CASE("a partial last line is not consumed, however long, an overlong line is skipped") {
  TempLog log;
  log.write(train(1, 1) + "\n" + std::string(3 << 20, 'x'));  // 3 MiB, no newline yet
  EventReader r(log.path);
  auto batch = r.poll();
  CHECK(seqs(batch.events) == std::vector<int64_t>{1});
  CHECK(batch.bad_lines.empty());
  const int64_t first = r.offset();
  log.write("\n" + train(2, 2) + "\n", true);
  batch = r.poll();
  CHECK(seqs(batch.events) == std::vector<int64_t>{2});
  REQUIRE(batch.bad_lines.size() == 1);
  CHECK(batch.bad_lines[0].line == 2);
  CHECK(batch.bad_lines[0].reason == "line longer than 1 MiB");
  CHECK(r.offset() == first + (3 << 20) + 1 + static_cast<int64_t>(train(2, 2).size()) + 1);
  // The overlong line is behind the reader now; reading on checks the last line, not it.
  log.write(train(3, 3) + "\n", true);
  batch = r.poll();
  CHECK_FALSE(batch.restarted);
  CHECK(seqs(batch.events) == std::vector<int64_t>{3});
}

TEST_CASE("a position survives a round trip and resumes at the same line number") {
  TempLog log;
  log.write(train(1, 1) + "\n" + train(2, 2) + "\n");
  EventReader r(log.path);
  r.poll();
  const LogPosition p = LogPosition::from_json(json::parse(r.position().to_json().dump()));
  CHECK(p.offset == r.offset());
  CHECK(p.lines == 2);
  CHECK(p.state.last_seq == 2);
  log.write("garbage\n", true);
  EventReader again(log.path, p);
  const auto batch = again.poll();
  CHECK_FALSE(batch.restarted);
  REQUIRE(batch.bad_lines.size() == 1);
  CHECK(batch.bad_lines[0].line == 3);
  CHECK_THROWS_AS(LogPosition::from_json(json{{"offset", 5}}), std::invalid_argument);
}

TEST_CASE("a log that shrank, was replaced or deleted is recognised and read from its start") {
  TempLog log;
  const std::string original = train(1, 1) + "\n" + train(2, 2) + "\n" + train(3, 3) + "\n";
  log.write(original);
  EventReader r(log.path);
  REQUIRE(r.poll().events.size() == 3);
  const LogPosition consumed = r.position();

  SECTION("truncated") {
    log.write(train(1, 1) + "\n");
    const auto batch = r.poll();
    REQUIRE(batch.restarted);
    CHECK_CONTAINS(*batch.restarted, ("is shorter"));
    CHECK(seqs(batch.events) == std::vector<int64_t>{1});
  }
  SECTION("replaced by a shorter file") {
    std::filesystem::remove(log.path);
    log.write(train(1, 7) + "\n");
    const auto batch = r.poll();
    REQUIRE(batch.restarted);
    CHECK(seqs(batch.events) == std::vector<int64_t>{1});
    CHECK(batch.events[0]["step"] == 7);
  }
  SECTION("replaced by a longer file, in place or as a new file") {
    const bool in_place = GENERATE(true, false);
    if (!in_place) std::filesystem::remove(log.path);
    const std::string other =
        train(1, 1, 9.0) + "\n" + train(2, 2, 9.0) + "\n" + train(3, 3, 9.0) + "\n" + train(4, 4) + "\n";
    REQUIRE(other.size() > original.size());
    log.write(other);
    const auto batch = r.poll();
    REQUIRE(batch.restarted);
    CHECK(seqs(batch.events) == std::vector<int64_t>{1, 2, 3, 4});
    CHECK(batch.events[0]["loss"] == 9.0);
  }
  SECTION("replaced by a longer file with the same last line, seen by a new reader") {
    // Only the first lines differ: a reader resuming from the stored position hashes the prefix.
    std::string other = train(1, 1, 8.0) + "\n" + train(2, 2) + "\n" + train(3, 3) + "\n";
    other.resize(original.size(), ' ');
    log.write(other.substr(0, original.size() - train(3, 3).size() - 1) + train(3, 3) + "\n" +
              train(4, 4) + "\n");
    EventReader fresh(log.path, consumed);
    const auto batch = fresh.poll();
    REQUIRE(batch.restarted);
    CHECK_CONTAINS(*batch.restarted, ("was replaced"));
  }
  SECTION("deleted with its directory") {
    std::filesystem::remove_all(log.dir);
    const auto batch = r.poll();
    REQUIRE(batch.restarted);
    CHECK_CONTAINS(*batch.restarted, ("is gone"));
    CHECK(batch.events.empty());
    CHECK(r.offset() == 0);
    CHECK_FALSE(r.poll().restarted);  // said once
  }
  SECTION("unchanged and appended to: no restart") {
    log.write(train(4, 4) + "\n", true);
    const auto batch = r.poll();
    CHECK_FALSE(batch.restarted);
    CHECK(seqs(batch.events) == std::vector<int64_t>{4});
    EventReader fresh(log.path, consumed);  // a new process, same file
    const auto b2 = fresh.poll();
    CHECK_FALSE(b2.restarted);
    CHECK(seqs(b2.events) == std::vector<int64_t>{4});
  }
}

TEST_CASE("an offset without identity (an older store) is adopted where it ends a line") {
  TempLog log;
  log.write(train(1, 1) + "\n" + train(2, 2) + "\n");
  const auto first = static_cast<int64_t>(train(1, 1).size() + 1);
  EventReader r(log.path, first);
  const auto batch = r.poll();
  CHECK_FALSE(batch.restarted);
  CHECK(seqs(batch.events) == std::vector<int64_t>{2});
  CHECK(r.position().lines == 2);
  EventReader mid(log.path, first - 3);  // not a line boundary: not this log's offset
  const auto b2 = mid.poll();
  REQUIRE(b2.restarted);
  CHECK(seqs(b2.events) == std::vector<int64_t>{1, 2});
}

TEST_CASE("a reopened writer continues after the last line a reader accepts") {
  TempLog log;
  log.write(train(1, 1) + "\n" +
            R"({"seq":9007199254740993,"kind":"train","time":1,"step":2,"tokens":20,"loss":1})" "\n" +
            R"({"seq":7,"kind":"eval","time":1,"step":2,"tokens":20,"val_loss":1e999})" "\n");
  {
    EventWriter w(log.path);
    CHECK(w.last_seq() == 1);
    CHECK(w.append(event_kind::kTrain, {{"step", 3}, {"tokens", 30}, {"loss", 2.0}}) == 2);
  }
  const auto batch = EventReader(log.path).poll();
  CHECK(seqs(batch.events) == std::vector<int64_t>{1, 2});
  CHECK(batch.bad_lines.size() == 2);
}

TEST_CASE("run_end's durations: optional (older logs load), never null, negative, non-finite or "
          "huge, and their parts within wall_s") {
  const auto end = [](json fields) {
    json f = {{"status", "budget_exhausted"}, {"wall_s", 10.0}};
    for (auto& [k, v] : fields.items()) f[k] = v;
    return line(1, "run_end", f);
  };
  CHECK(refusal(end(json::object())) == "");  // a log from before the fields
  CHECK(refusal(end({{"setup_s", 2.5}, {"standby_s", 30.0}, {"train_s", 9.0}, {"eval_s", 0.5},
                     {"checkpoint_s", 0.5}})) == "");
  CHECK(refusal(end({{"train_s", 10.0005}})) == "");  // rounding: within 1 ms
  CHECK(refusal(line(1, "run_start", {{"prestarted", true}})) == "");
  for (const char* field : {"setup_s", "standby_s", "train_s", "eval_s", "checkpoint_s"}) {
    for (const json& bad : {json(-1.0), json(nullptr), json(1e300), json(2e8), json("5"), json(true)}) {
      INFO(field << " = " << bad.dump());
      CHECK(refusal(end({{field, bad}})) ==
            std::string("field '") + field + "' must be a number of seconds in [0, 1e8], got " +
                bad.dump());
    }
  }
  // Not a double at all (1e999) or not JSON (NaN): the line is refused as every such line is.
  CHECK(refusal(R"({"seq":1,"kind":"run_end","time":1,"step":1,"tokens":1,"status":"failed","train_s":1e999})") ==
        "a number does not fit a double");
  CHECK_CONTAINS(refusal(R"({"seq":1,"kind":"run_end","time":1,"step":1,"tokens":1,"status":"failed","eval_s":NaN})"),
                 ("not JSON"));
  // Training, evaluation and checkpoints are disjoint parts of wall_s.
  CHECK(refusal(end({{"train_s", 8.0}, {"eval_s", 1.5}, {"checkpoint_s", 1.0}})) ==
        "train_s + eval_s + checkpoint_s (10.5) exceed wall_s (10.0)");
  CHECK(refusal(line(1, "run_start", {{"prestarted", 1}})) ==
        "field 'prestarted' must be true or false, got 1");
}
