#include "mxablate/orchestrator/recipe_error.h"

#include <fmt/format.h>

namespace mxablate::orchestrator {
namespace {

std::string format(const std::string& file, Location at, const std::string& message) {
  // One line, always: a message quoting a multi-line value must not break the CLI's contract.
  std::string flat;
  for (char c : message) flat += (c == '\n' || c == '\r') ? ' ' : c;
  if (!at.known()) return fmt::format("{}: {}", file, flat);
  return fmt::format("{}:{}:{}: {}", file, at.line, at.column, flat);
}

}  // namespace

RecipeError::RecipeError(const std::string& file, Location at, const std::string& message)
    : std::runtime_error(format(file, at, message)), file_(file), at_(at), message_(message) {}

}  // namespace mxablate::orchestrator
