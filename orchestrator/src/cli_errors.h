// How commands report failure. Every error reaches the user as one line on stderr; the type
// decides the exit code (docs/design.md §7: conventional exit codes).
#pragma once

#include <stdexcept>
#include <string>

namespace mxablate::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;   // the work itself failed
inline constexpr int kExitBadInput = 2;  // bad arguments, recipe, or input file

// Bad input: a malformed file, an impossible option value. Exit code 2.
struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A command that ran and ends with a specific exit code (1 when runs failed, 128+signal after
// Ctrl-C/SIGTERM); what() is the one line printed (nothing when empty).
struct ExitStatus : std::runtime_error {
  ExitStatus(int exit_code, const std::string& message)
      : std::runtime_error(message), code(exit_code) {}
  int code;
};

}  // namespace mxablate::cli
