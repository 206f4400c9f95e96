// Runs a short-lived command with Boost.Process and a time limit, collecting its stdout and
// stderr (through temporary files: no pipe can fill up and stall it, and no SIGCHLD machinery of
// Boost.Asio competes with the sweep loop's own SIGCHLD handler).
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace mxablate::orchestrator {

struct CommandOutput {
  int exit_code = -1;  // -1: killed by a signal (or by us at the time limit)
  bool timed_out = false;
  std::string out;
  std::string err;
};

// The program's path: as given when it contains a '/', else the first match on $PATH (then
// /usr/bin, /usr/sbin, /usr/local/bin); nullopt when there is none.
std::optional<std::filesystem::path> find_program(const std::string& name);

// Throws std::runtime_error when the program cannot be started.
CommandOutput run_command(const std::filesystem::path& program,
                          const std::vector<std::string>& args,
                          std::chrono::milliseconds timeout);

}  // namespace mxablate::orchestrator
