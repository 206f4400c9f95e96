// Where something was written in a recipe, and the error that says so: every recipe problem
// reaches the user as one line "FILE:LINE:COLUMN: KEY: what is wrong, what was expected".
#pragma once

#include <stdexcept>
#include <string>

namespace mxablate::orchestrator {

// 1-based line and column; line 0 means "unknown" (the error names the file only).
struct Location {
  int line = 0;
  int column = 0;
  bool known() const { return line > 0; }
  bool operator==(const Location&) const = default;
};

class RecipeError : public std::runtime_error {
 public:
  RecipeError(const std::string& file, Location at, const std::string& message);
  const std::string& file() const { return file_; }
  Location at() const { return at_; }
  const std::string& message() const { return message_; }

 private:
  std::string file_;
  Location at_;
  std::string message_;
};

}  // namespace mxablate::orchestrator
