#include "mxablate/orchestrator/trainer_locator.h"

#include <unistd.h>

#include <cstdlib>
#include <fmt/format.h>

namespace mxablate::orchestrator {
namespace {

namespace fs = std::filesystem;

// Empty when `p` is a runnable file, otherwise why not.
std::string problem_with(const fs::path& p) {
  std::error_code ec;
  if (!fs::exists(p, ec)) return "does not exist";
  if (fs::is_directory(p, ec)) return "is a directory";
  if (::access(p.c_str(), X_OK) != 0) return "is not executable";
  return "";
}

}  // namespace

fs::path own_directory() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::current_path() : exe.parent_path();
}

fs::path find_trainer(const std::optional<std::string>& option) {
  if (option) {
    const fs::path p = fs::absolute(*option);
    if (const std::string why = problem_with(p); !why.empty())
      throw TrainerNotFound(fmt::format("trainer binary {} (from --trainer) {}", p.string(), why));
    return p;
  }
  if (const char* env = std::getenv("MXABLATE_TRAINER"); env && *env) {
    const fs::path p = fs::absolute(env);
    if (const std::string why = problem_with(p); !why.empty())
      throw TrainerNotFound(
          fmt::format("trainer binary {} (from MXABLATE_TRAINER) {}", p.string(), why));
    return p;
  }
  const fs::path beside = own_directory() / "mxablate-train";
  if (const std::string why = problem_with(beside); !why.empty())
    throw TrainerNotFound(fmt::format(
        "trainer binary not found: {} {}; build it (ninja mxablate-train), or pass --trainer "
        "PATH or set MXABLATE_TRAINER",
        beside.string(), why));
  return beside;
}

}  // namespace mxablate::orchestrator
