// Reading a JSON file and the rules for its values (json_file.h): the one place where the JSON
// library's exceptions become one line naming the file and the key or byte.
#include "mxablate/contract/json_file.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <vector>

namespace mxablate::contract {
namespace {

using nlohmann::json;

// Where the parser is: one frame per open object or array. An object's frame holds the key whose
// value is being read (`pending`); an array's the index of the element being read.
struct Frame {
  bool array = false;
  std::string key;
  bool pending = false;
  int64_t index = 0;
};

// Thrown from the parser's callback to stop it (the library lets it through).
struct TooDeep {};

std::string key_path(const std::vector<Frame>& frames) {
  std::string path;
  for (const Frame& f : frames) {
    if (f.array) {
      path += "[" + std::to_string(f.index) + "]";
    } else if (f.pending) {
      path += (path.empty() ? "" : ".") + shown_json_key(f.key);
    }
  }
  // A message stays one readable line however deep the file nests.
  if (path.size() > 120) path = path.substr(0, 100) + "...";
  return path;
}

// Bytes a message may not carry (control characters, anything beyond ASCII): '?'.
std::string printable(std::string m, size_t at_most) {
  for (char& ch : m)
    if (static_cast<unsigned char>(ch) < 0x20 || static_cast<unsigned char>(ch) >= 0x7f) ch = '?';
  if (m.size() > at_most) m = m.substr(0, at_most - 3) + "...";
  return m;
}

}  // namespace

std::string json_exception_reason(const json::exception& e) { return json_reason_of_message(e.what()); }

std::string json_reason_of_message(std::string m) {
  // "[json.exception.parse_error.101] parse error at line 1, column 5: syntax error while parsing
  // value - invalid literal; last read: 'NaN'": keep "invalid literal; last read: 'NaN'" (the
  // caller says where), with what was last read printable and short.
  if (const size_t p = m.find("] "); m.rfind("[json.exception.", 0) == 0 && p != std::string::npos)
    m.erase(0, p + 2);
  if (m.rfind("parse error", 0) == 0)
    if (const size_t colon = m.find(": "); colon != std::string::npos) m.erase(0, colon + 2);
  if (const size_t dash = m.find(" - "); dash != std::string::npos) m.erase(0, dash + 3);
  // Newer versions of the library name an empty text apart; older ones (Debian 12's) as any early end.
  if (m.rfind("attempting to parse an empty input", 0) == 0)
    m = "unexpected end of input; expected '[', '{', or a literal";
  std::string last;
  if (const size_t p = m.find("; last read: "); p != std::string::npos) {
    last = m.substr(p);
    m.resize(p);
  }
  return printable(m, 200) + printable(last, 60);
}

json parse_json_text(std::string_view text, const std::string& name) {
  std::vector<Frame> frames;
  const auto element_done = [&frames] {
    if (frames.empty()) return;
    Frame& f = frames.back();
    if (f.array) ++f.index;
    else f.pending = false;
  };
  const json::parser_callback_t track = [&](int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth >= kMaxJsonDepth) throw TooDeep{};
        frames.push_back({event == json::parse_event_t::array_start, "", false, 0});
        break;
      case json::parse_event_t::key:
        if (!frames.empty() && parsed.is_string()) {
          frames.back().key = parsed.get<std::string>();
          frames.back().pending = true;
        }
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!frames.empty()) frames.pop_back();
        element_done();
        break;
      case json::parse_event_t::value: element_done(); break;
    }
    return true;
  };
  const auto where = [&] {
    const std::string path = key_path(frames);
    return name + ": " + (path.empty() ? "" : path + ": ");
  };
  try {
    return json::parse(text.begin(), text.end(), track);
  } catch (const TooDeep&) {
    throw JsonFileError(where() + "nested deeper than " + std::to_string(kMaxJsonDepth) +
                        " levels");
  } catch (const json::parse_error& e) {
    throw JsonFileError(where() + "not valid JSON at byte " + std::to_string(e.byte) + " (" +
                        json_exception_reason(e) + ")");
  } catch (const json::exception& e) {
    // out_of_range.406: a number beyond a double, reported at its key like any bad value.
    throw JsonFileError(where() + json_exception_reason(e) + " (not a finite double)");
  }
}

json parse_json_file(const std::string& path, std::uintmax_t max_bytes) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) throw JsonFileError(path + ": does not exist");
  if (!fs::is_regular_file(st)) throw JsonFileError(path + ": not a regular file");
  const std::uintmax_t size = fs::file_size(path, ec);
  if (ec) throw JsonFileError(path + ": cannot read its size");
  if (size > max_bytes)
    throw JsonFileError(path + ": " + std::to_string(size) + " bytes, more than the " +
                        std::to_string(max_bytes) + " a JSON file may have");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw JsonFileError(path + ": cannot open");
  std::string text;
  text.reserve(size);
  // Read in chunks and stop past max_bytes: a file that grew since its size was taken is still
  // bounded.
  char chunk[1 << 16];
  while (in.read(chunk, sizeof chunk) || in.gcount() > 0) {
    text.append(chunk, static_cast<size_t>(in.gcount()));
    if (text.size() > max_bytes)
      throw JsonFileError(path + ": more than the " + std::to_string(max_bytes) +
                          " bytes a JSON file may have");
  }
  if (in.bad()) throw JsonFileError(path + ": read failed");
  return parse_json_text(text, path);
}

std::string shown_json(const json& v) {
  if (v.is_number_float() && !std::isfinite(v.get<double>())) {
    const double d = v.get<double>();
    return std::isnan(d) ? "nan" : d > 0 ? "inf" : "-inf";
  }
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string shown_json_key(const std::string& key) {
  const std::string quoted = shown_json(json(key));
  return quoted.size() == key.size() + 2 && quoted.substr(1, key.size()) == key ? key : quoted;
}

std::string json_to(const json& v, double& out) {
  if (!v.is_number()) return "expected a number, got " + shown_json(v);
  const double d = v.get<double>();
  if (!std::isfinite(d)) return "must be a finite number, got " + shown_json(v);
  out = d;
  return "";
}

std::string json_to(const json& v, int64_t& out) {
  if (!v.is_number()) return "expected an integer, got " + shown_json(v);
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || std::floor(d) != d) return "expected an integer, got " + shown_json(v);
    if (std::fabs(d) > kLargestFloatInteger)
      return "out of range (beyond 9e15 write an integer digit by digit, without an exponent), "
             "got " + shown_json(v);
    out = static_cast<int64_t>(d);
  } else if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return "out of range (an integer from -9223372036854775808 to 9223372036854775807), got " +
             shown_json(v);
    out = static_cast<int64_t>(v.get<uint64_t>());
  } else {
    out = v.get<int64_t>();
  }
  return "";
}

std::string json_to(const json& v, int& out) {
  int64_t wide = 0;
  if (std::string why = json_to(v, wide); !why.empty()) return why;
  if (wide < -(int64_t{1} << 31) || wide >= (int64_t{1} << 31))
    return "out of range (an integer from -2147483648 to 2147483647), got " + v.dump();
  out = static_cast<int>(wide);
  return "";
}

std::string json_to(const json& v, uint64_t& out) {
  if (v.is_number_unsigned()) {
    out = v.get<uint64_t>();
    return "";
  }
  int64_t wide = 0;
  if (std::string why = json_to(v, wide); !why.empty()) return why;
  if (wide < 0) return "must be >= 0, got " + shown_json(v);
  out = static_cast<uint64_t>(wide);
  return "";
}

std::string json_to(const json& v, bool& out) {
  if (!v.is_boolean()) return "expected true or false, got " + shown_json(v);
  out = v.get<bool>();
  return "";
}

std::string json_to(const json& v, std::string& out) {
  if (!v.is_string()) return "expected a string, got " + shown_json(v);
  try {
    (void)v.dump();  // throws on invalid UTF-8 (a value built in-process from YAML may hold any)
  } catch (const json::type_error&) {
    return "not valid UTF-8, got " + shown_json(v);
  }
  const std::string& s = v.get_ref<const std::string&>();
  if (s.find('\0') != std::string::npos) return "contains a NUL character, got " + shown_json(v);
  out = s;
  return "";
}

}  // namespace mxablate::contract
