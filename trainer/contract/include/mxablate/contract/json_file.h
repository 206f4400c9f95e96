// Reading a JSON file: the one definition of "parse it and say where it is wrong", used by every
// reader of a JSON file the project does not hold in its own database (config.json, a data
// directory's manifest.json, a checkpoint's state.json, the JSON lines `data prepare` reads), and
// of the rules a JSON value must follow to become a typed field. docs/design.md §10: bad input
// is one clear line; §11: settings are parsed once, at the boundary, into types, and each rule
// has one definition.
//
// Every refusal is one printable line "NAME: WHERE: WHAT": NAME the file (as the caller names
// it), WHERE the key path being read (`splits.train.shards[2].tokens`) or, where the parser
// fails before a key is known, nothing and a byte offset in WHAT. No message carries the JSON
// library's "[json.exception…]" text or any raw byte of the input. Event lines have their own
// rules (event_line.h: a bad line is skipped with a warning, never an error).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace mxablate::contract {

// Deeper nesting is refused while parsing: the library's writer and comparisons recurse, so a
// file of a million '[' would otherwise overflow the stack later (no file we write nests beyond
// a handful of levels).
inline constexpr int kMaxJsonDepth = 64;
// A file larger than this is refused unread (the largest we write, a manifest of many shards,
// stays far below).
inline constexpr std::uintmax_t kMaxJsonFileBytes = std::uintmax_t{64} << 20;

// The largest integer a file may write as a float (YAML reads 100e6 as one), and the largest
// token count: floats are exact integers only up to 2^53, and the messages say "9e15". The
// recipe schema and every JSON reader check against this one number.
inline constexpr double kLargestFloatInteger = 9.0e15;

// A file that is not JSON, or not the JSON its reader expects: one line naming the file and the
// key or byte offset. Callers turn it into their own error type (ConfigError, DataError,
// CheckpointRejected, …), which decides the exit code.
struct JsonFileError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Parses `text`, the contents of `name`. Numbers beyond a double (1e400), invalid JSON (NaN,
// Infinity, a truncated file, bytes that are not UTF-8) and nesting deeper than kMaxJsonDepth
// throw JsonFileError.
nlohmann::json parse_json_text(std::string_view text, const std::string& name);
// Reads and parses the file at `path` (a regular file of at most `max_bytes`; a FIFO or a device
// is refused unread, so nothing blocks or reads forever). JsonFileError names `path`.
nlohmann::json parse_json_file(const std::string& path,
                               std::uintmax_t max_bytes = kMaxJsonFileBytes);

// The reason in one of the JSON library's exceptions, as one printable line without its
// "[json.exception…]" prefix or line/column (for parse_json_text's callers that parse themselves).
std::string json_exception_reason(const nlohmann::json::exception& e);
// The same from an exception's what() text. The JSON library's wording differs between its
// versions (an empty text: "unexpected end of input; expected '[', '{', or a literal" in Debian
// 12's, "attempting to parse an empty input; …" in the GPU image's); this is the one place that
// maps such differences to one message, so every machine names a problem alike.
std::string json_reason_of_message(std::string message);

// A value as it appears in an error message: JSON text, invalid UTF-8 replaced, non-finite
// numbers spelled out (JSON would print them as null).
std::string shown_json(const nlohmann::json& v);
// A key as it appears in a key path: as is when it is plain, else quoted.
std::string shown_json_key(const std::string& key);

// The rules for one JSON value becoming one typed field. Each returns "" and sets `out` when `v`
// follows the rule, else says what is wrong ("expected an integer, got 1.5"); the caller puts
// the file and key in front and throws its own error type.
//   double:   a finite number.
//   int64_t:  an integer that fits; a float only with an integral value up to 9e15 (YAML writes
//             100e6 as a float, and floats are exact integers only up to 2^53).
//   int:      the same, in 32 bits.
//   uint64_t: the same, >= 0, the whole uint64 range when written as an integer.
//   bool:     true or false.
//   string:   valid UTF-8 without NUL (strings end up in file names, logs and SQLite).
std::string json_to(const nlohmann::json& v, double& out);
std::string json_to(const nlohmann::json& v, int64_t& out);
std::string json_to(const nlohmann::json& v, int& out);
std::string json_to(const nlohmann::json& v, uint64_t& out);
std::string json_to(const nlohmann::json& v, bool& out);
std::string json_to(const nlohmann::json& v, std::string& out);

}  // namespace mxablate::contract
