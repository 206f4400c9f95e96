// Running the real binaries from end-to-end tests.
#pragma once

#include <sys/wait.h>

#include <array>
#include <initializer_list>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace mxablate::test {

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs `command` through the shell, capturing its output.
inline CommandResult run_command(const std::string& command) {
  CommandResult result;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return result;
  std::array<char, 4096> buffer{};
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) result.output.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

// How many live (not zombie) processes have a command line holding every one of `parts`.
// Processes come and go while /proc is listed (other tests run in parallel): an entry that
// vanishes is skipped, never an exception.
inline int count_live_processes(std::initializer_list<std::string> parts) {
  int n = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/proc", ec), end; !ec && it != end;
       it.increment(ec)) {
    std::ifstream cmd(it->path() / "cmdline");
    const std::string args((std::istreambuf_iterator<char>(cmd)), {});
    bool all = !args.empty();
    for (const std::string& part : parts) all = all && args.find(part) != std::string::npos;
    if (!all) continue;
    std::ifstream stat(it->path() / "stat");
    std::string st;
    std::getline(stat, st);
    const size_t paren = st.rfind(')');
    const bool zombie = paren != std::string::npos && paren + 2 < st.size() && st[paren + 2] == 'Z';
    if (!zombie && !st.empty()) ++n;
  }
  return n;
}

// A fresh directory under the system temp dir, removed at scope exit.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& name) {
    path = std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string operator/(const std::string& file) const { return (path / file).string(); }
};

}  // namespace mxablate::test
