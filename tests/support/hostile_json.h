// Hostile values for the tests of every JSON file reader (contract/json_file.h): numbers JSON
// cannot hold, integers beyond uint64, a string where a number goes, NaN, a file cut off inside
// a value. Each reader's test puts them at its keys and expects one line naming file and key.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mxablate::test {

struct HostileValue {
  std::string name;
  std::string raw;        // the JSON text put in the value's place
  std::string message;    // what follows "FILE: KEY: " at an integer key (a prefix)
  bool truncate = false;  // the file ends where the value would start
};

// The values every reader is tested with, and what each gives at a key that holds an integer.
inline std::vector<HostileValue> hostile_integer_values() {
  const std::string beyond_9e15 =
      "out of range (beyond 9e15 write an integer digit by digit, without an exponent), got ";
  return {
      {"1e400", "1e400", "number overflow parsing '1e400' (not a finite double)"},
      {"-1e400", "-1e400", "number overflow parsing '-1e400' (not a finite double)"},
      {"beyond uint64", "18446744073709551616", beyond_9e15 + "1.8446744073709552e+19"},
      {"1e19", "1e19", beyond_9e15 + "1e+19"},
      {"a string", "\"12\"", "expected an integer, got \"12\""},
      {"NaN", "NaN", "not valid JSON at byte "},
      {"truncated", "", "not valid JSON at byte ", true},
  };
}

// The JSON text of `j` (indented as our writers write it) with the value at `pointer` replaced
// by `v.raw`, or the text cut off where that value starts.
inline std::string with_hostile_value(nlohmann::json j, const std::string& pointer,
                                      const HostileValue& v) {
  const std::string mark = "\"@@mxablate-hostile-value@@\"";
  j[nlohmann::json::json_pointer(pointer)] = nlohmann::json::parse(mark);
  std::string text = j.dump(2);
  const size_t at = text.find(mark);
  return v.truncate ? text.substr(0, at) : text.replace(at, mark.size(), v.raw);
}

// One line of our own words: no newline, no "[json.exception…]".
inline bool is_one_clean_line(const std::string& m) {
  const std::string body = !m.empty() && m.back() == '\n' ? m.substr(0, m.size() - 1) : m;
  return !body.empty() && body.find('\n') == std::string::npos &&
         body.find("json.exception") == std::string::npos;
}

}  // namespace mxablate::test
