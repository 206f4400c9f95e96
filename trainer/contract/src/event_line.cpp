#include "mxablate/contract/event_line.h"

#include <array>
#include <cmath>
#include <initializer_list>

#include "mxablate/contract/event_log.h"

namespace mxablate::contract {
namespace {

using nlohmann::json;

// What a field may hold. "Nullable" kinds are measurements: null is the writer's NaN/Inf.
enum class Type {
  kCount,        // integer in [0, kMaxEventSeq]
  kMeasure,      // number or null
  kNonNegative,  // number >= 0, or null
  kFraction,     // number in [0, 1], or null
  kText,         // non-empty string
  kString,       // any string, "" included
  kLayer,        // integer >= 0 or non-empty string
  kBool,
  kObject,
  kRunStatus,    // one of run_status
  kSeverity,     // warning | fatal
  kSeconds,      // a duration: a number in [0, kMaxEventSeconds], never null
};

struct Field {
  const char* name;
  Type type;
  bool required;
};

struct KindRule {
  const char* kind;
  bool curve;            // may not go back in step/tokens
  bool starts_timeline;  // sets the step/tokens floor to its own
  std::initializer_list<Field> fields;
};

namespace k = event_kind;
const std::array<KindRule, 13> kKinds{{
    {k::kRunStart, false, true,
     {{"attempt", Type::kCount, false}, {"params", Type::kCount, false},
      {"device", Type::kText, false}, {"resumed", Type::kBool, false},
      {"versions", Type::kObject, false}, {"prestarted", Type::kBool, false}}},
    {k::kTrain, true, false,
     {{"loss", Type::kMeasure, true}, {"lr", Type::kMeasure, false},
      {"grad_norm", Type::kNonNegative, false}, {"tokens_per_s", Type::kNonNegative, false}}},
    {k::kEval, true, false, {{"val_loss", Type::kMeasure, true}}},
    {k::kQuantStats, true, false,
     {{"layer", Type::kLayer, true}, {"gemm", Type::kText, true},
      {"operand", Type::kText, true}, {"relative_error", Type::kNonNegative, false},
      {"fraction_saturated", Type::kFraction, false},
      {"fraction_flushed", Type::kFraction, false}, {"mean_error", Type::kMeasure, false},
      {"occ_fraction", Type::kFraction, false}}},
    {k::kDivergence, false, false,
     {{"reason", Type::kText, true}, {"value", Type::kMeasure, false},
      {"severity", Type::kSeverity, true}}},
    {k::kCheckpoint, false, false, {{"path", Type::kText, true}}},
    {k::kCheckpointRejected, false, false,
     {{"path", Type::kText, true}, {"reason", Type::kText, true},
      {"moved_to", Type::kString, false}}},
    {k::kResume, false, true, {{"discard_after_seq", Type::kCount, true}}},
    {k::kTargetReached, true, false, {{"val_loss", Type::kMeasure, true}}},
    {k::kLiveTarget, false, false,
     {{"val_loss", Type::kMeasure, false}, {"basis", Type::kString, false},
      {"ignored", Type::kText, false}}},
    // tokens_to_target*: null where the projection does not reach the target within its horizon;
    // absent with no_projection (the one-line reason there is none).
    {k::kProjection, true, false,
     {{"target", Type::kMeasure, false}, {"confidence", Type::kFraction, false},
      {"points", Type::kCount, false}, {"loss_at_budget", Type::kMeasure, false},
      {"loss_at_budget_lo", Type::kMeasure, false}, {"loss_at_budget_hi", Type::kMeasure, false},
      {"tokens_to_target", Type::kNonNegative, false},
      {"tokens_to_target_lo", Type::kNonNegative, false},
      {"tokens_to_target_hi", Type::kNonNegative, false}, {"not_reaching", Type::kBool, false},
      {"streak", Type::kCount, false}, {"no_projection", Type::kText, false}}},
    {k::kPrecisionSwitch, false, false,
     {{"phase", Type::kCount, true}, {"fprop", Type::kText, true}, {"dgrad", Type::kText, true},
      {"wgrad", Type::kText, true}}},
    {k::kRunEnd, false, false,
     {{"status", Type::kRunStatus, true}, {"wall_s", Type::kNonNegative, false},
      {"tokens_per_s", Type::kNonNegative, false}, {"peak_rss_bytes", Type::kCount, false},
      {"peak_gpu_bytes", Type::kCount, false}, {"reason", Type::kText, false},
      {"setup_s", Type::kSeconds, false}, {"train_s", Type::kSeconds, false},
      {"eval_s", Type::kSeconds, false}, {"checkpoint_s", Type::kSeconds, false},
      {"standby_s", Type::kSeconds, false}, {"checkpoint_write_s", Type::kSeconds, false},
      {"graphed_steps", Type::kCount, false}, {"mxfp4_as_fp8_tiles", Type::kObject, false}}},
}};

const char* describe(Type t) {
  switch (t) {
    case Type::kCount: return "an integer in [0, 2^53]";
    case Type::kMeasure: return "a number or null";
    case Type::kNonNegative: return "a number >= 0 or null";
    case Type::kFraction: return "a number in [0, 1] or null";
    case Type::kText: return "a non-empty string";
    case Type::kString: return "a string";
    case Type::kLayer: return "a layer index or name";
    case Type::kBool: return "true or false";
    case Type::kObject: return "an object";
    case Type::kRunStatus:
      return "converged, budget_exhausted, projected_not_reached, diverged, failed or interrupted";
    case Type::kSeverity: return "warning or fatal";
    case Type::kSeconds: return "a number of seconds in [0, 1e8]";
  }
  return "?";
}

// Bytes outside printable ASCII become '?', and the text is cut: reasons go to terminals and
// into the database, whatever the line held.
std::string printable(std::string_view s, size_t max = 40) {
  std::string out;
  for (char c : s) {
    if (out.size() >= max) {
      out += "...";
      break;
    }
    out += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  return out;
}

std::optional<int64_t> count_of(const json& v) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u <= static_cast<uint64_t>(kMaxEventSeq)) return static_cast<int64_t>(u);
    return std::nullopt;
  }
  if (v.is_number_integer()) {
    const auto i = v.get<int64_t>();
    if (i >= 0 && i <= kMaxEventSeq) return i;
  }
  return std::nullopt;
}

bool has_type(const json& v, Type t) {
  const auto number_in = [&](double lo, double hi) {
    if (v.is_null()) return true;
    if (!v.is_number()) return false;
    const double d = v.get<double>();
    return std::isfinite(d) && d >= lo && d <= hi;
  };
  constexpr double kInf = HUGE_VAL;
  switch (t) {
    case Type::kCount: return count_of(v).has_value();
    case Type::kMeasure: return number_in(-kInf, kInf);
    case Type::kNonNegative: return number_in(0, kInf);
    case Type::kFraction: return number_in(0, 1);
    case Type::kText: return v.is_string() && !v.get_ref<const std::string&>().empty();
    case Type::kString: return v.is_string();
    case Type::kLayer:
      return count_of(v).has_value() || (v.is_string() && !v.get_ref<const std::string&>().empty());
    case Type::kBool: return v.is_boolean();
    case Type::kObject: return v.is_object();
    case Type::kRunStatus: {
      if (!v.is_string()) return false;
      const auto& s = v.get_ref<const std::string&>();
      for (const char* ok : {run_status::kConverged, run_status::kBudgetExhausted,
                             run_status::kProjectedNotReached, run_status::kDiverged,
                             run_status::kFailed, run_status::kInterrupted})
        if (s == ok) return true;
      return false;
    }
    case Type::kSeverity:
      return v.is_string() && (v.get_ref<const std::string&>() == "warning" ||
                               v.get_ref<const std::string&>() == "fatal");
    case Type::kSeconds: return !v.is_null() && number_in(0, kMaxEventSeconds);
  }
  return false;
}

// Deeper nesting than an event ever has is refused before parsing: the parsed value and its
// serialization would otherwise recurse once per level.
bool nesting_within(std::string_view line, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : line) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

// The length of the first string (key or value) longer than the limit; 0 when none is.
size_t overlong_string(const json& v) {
  if (v.is_string()) {
    const size_t n = v.get_ref<const std::string&>().size();
    return n > kMaxEventStringBytes ? n : 0;
  }
  if (v.is_object()) {
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (it.key().size() > kMaxEventStringBytes) return it.key().size();
      if (const size_t n = overlong_string(it.value())) return n;
    }
  } else if (v.is_array()) {
    for (const auto& item : v)
      if (const size_t n = overlong_string(item)) return n;
  }
  return 0;
}

std::string json_error(const nlohmann::json::exception& e) {
  // "[json.exception.parse_error.101] parse error at line 1, column 5: syntax error while
  // parsing value - invalid literal; last read: '…'": keep the reason, drop the echoed bytes.
  std::string what = e.what();
  if (const size_t dash = what.find(" - "); dash != std::string::npos) what = what.substr(dash + 3);
  else if (const size_t close = what.find("] "); close != std::string::npos) what = what.substr(close + 2);
  if (const size_t last = what.find("; last read"); last != std::string::npos) what.resize(last);
  if (what.rfind("number overflow", 0) == 0) return "a number does not fit a double";
  return "not JSON: " + printable(what, 80);
}

ParsedEventLine bad(std::string why) { return {std::nullopt, std::move(why)}; }

// run_end's parts of the attempt's time (docs/design.md §9, "Busy slots"): training, evaluation
// and checkpoints are disjoint stretches of wall_s, measured on one clock, so together they cannot
// exceed it; a log claiming more is not trusted. Empty when consistent (or wall_s is absent).
std::string busy_beyond_wall(const json& ev) {
  const auto wall = ev.find("wall_s");
  if (wall == ev.end() || !wall->is_number()) return "";
  double parts = 0;
  for (const char* name : {"train_s", "eval_s", "checkpoint_s"})
    if (const auto it = ev.find(name); it != ev.end() && it->is_number()) parts += it->get<double>();
  const double limit = wall->get<double>() * (1 + 1e-9) + kEventSecondsSlack;
  if (parts <= limit) return "";
  return "train_s + eval_s + checkpoint_s (" + printable(json(parts).dump()) +
         ") exceed wall_s (" + printable(wall->dump()) + ")";
}

}  // namespace

ParsedEventLine parse_event_line(std::string_view line, EventLineState& state) {
  if (line.empty()) return bad("empty line");
  if (line.size() > kMaxEventLineBytes) return bad("line longer than 1 MiB");
  if (line.find('\0') != std::string_view::npos) return bad("NUL byte in the line");
  if (!nesting_within(line, kMaxEventDepth)) return bad("nested deeper than 16 levels");
  json ev;
  try {
    ev = json::parse(line.begin(), line.end());
  } catch (const json::exception& e) {
    return bad(json_error(e));
  }
  if (!ev.is_object()) return bad("not a JSON object");
  if (const size_t n = overlong_string(ev))
    return bad("a string of " + std::to_string(n) + " bytes (at most 4096)");

  const auto seq_it = ev.find("seq");
  if (seq_it == ev.end()) return bad("missing field 'seq'");
  const std::optional<int64_t> seq = count_of(*seq_it);
  if (!seq || *seq < 1) return bad("seq " + printable(seq_it->dump()) + " is not an integer in [1, 2^53]");
  if (*seq <= state.last_seq)
    return bad("seq " + std::to_string(*seq) + " does not follow seq " +
               std::to_string(state.last_seq) + " (seq must increase)");

  const auto kind_it = ev.find("kind");
  if (kind_it == ev.end()) return bad("missing field 'kind'");
  if (!kind_it->is_string()) return bad("field 'kind' is not a string");
  const KindRule* rule = nullptr;
  for (const KindRule& r : kKinds)
    if (kind_it->get_ref<const std::string&>() == r.kind) rule = &r;
  if (!rule) return bad("unknown kind '" + printable(kind_it->get_ref<const std::string&>()) + "'");

  const auto time_it = ev.find("time");
  if (time_it == ev.end()) return bad("missing field 'time'");
  if (!time_it->is_number() || !has_type(*time_it, Type::kNonNegative))
    return bad("field 'time' must be a number >= 0");

  int64_t step = 0, tokens = 0;
  for (auto [name, out] : {std::pair{"step", &step}, std::pair{"tokens", &tokens}}) {
    const auto it = ev.find(name);
    if (it == ev.end()) return bad(std::string("missing field '") + name + "'");
    const std::optional<int64_t> v = count_of(*it);
    if (!v)
      return bad(std::string("field '") + name + "' must be an integer in [0, 2^53], got " +
                 printable(it->dump()));
    *out = *v;
  }
  for (const Field& f : rule->fields) {
    const auto it = ev.find(f.name);
    if (it == ev.end()) {
      if (f.required) return bad(std::string("missing field '") + f.name + "'");
      continue;
    }
    if (!has_type(*it, f.type))
      return bad(std::string("field '") + f.name + "' must be " + describe(f.type) + ", got " +
                 printable(it->dump()));
  }
  if (rule->kind == std::string_view(k::kResume) &&
      ev["discard_after_seq"].get<int64_t>() >= *seq)
    return bad("discard_after_seq must be below the resume event's own seq");
  if (rule->kind == std::string_view(k::kRunEnd)) {
    if (std::string why = busy_beyond_wall(ev); !why.empty()) return bad(why);
  }
  if (rule->curve && (step < state.step_floor || tokens < state.tokens_floor))
    return bad("step/tokens " + std::to_string(step) + "/" + std::to_string(tokens) +
               " go back from " + std::to_string(state.step_floor) + "/" +
               std::to_string(state.tokens_floor) + " without a resume");

  state.last_seq = *seq;
  if (rule->starts_timeline) {
    state.step_floor = step;
    state.tokens_floor = tokens;
  } else if (rule->curve) {
    state.step_floor = std::max(state.step_floor, step);
    state.tokens_floor = std::max(state.tokens_floor, tokens);
  }
  return {std::move(ev), {}};
}

}  // namespace mxablate::contract
