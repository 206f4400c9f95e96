// A prestarted ("standby") trainer (docs/design.md §9, "Busy slots"): while a local slot still
// runs one run, the orchestrator starts the next run's trainer early. It does everything up to its
// first step (process start, device context, data, model, optimizer), then waits on a descriptor
// it inherited, named by MXABLATE_STANDBY_FD, until the orchestrator writes one go byte there
// (the slot is free: train) or closes it (the orchestrator stopped or died: exit without writing
// anything, the run stays pending). This header is the one definition both sides use.
#pragma once

#include <optional>
#include <string>

namespace mxablate::contract {

inline constexpr const char* kStandbyFdEnv = "MXABLATE_STANDBY_FD";
inline constexpr char kStandbyGo = 'g';

// MXABLATE_STANDBY_FD, parsed once at the trainer's boundary: nullopt when unset or empty; the
// descriptor when it is a decimal number >= 3 naming an open pipe or socket (then marked
// close-on-exec and the variable removed: nothing this process starts inherits either). Anything
// else is a ConfigError naming the variable and the value.
std::optional<int> standby_fd_from_environment();

enum class StandbyRelease {
  kGo,         // the orchestrator released it: train
  kAbandoned,  // end of file, an error or another byte: exit without training
};

// Blocks until the orchestrator releases or abandons the standby; closes `fd` either way.
StandbyRelease wait_for_release(int fd);

// What a trainer says on stderr when it was abandoned (one line, no prefix).
std::string abandoned_message();

}  // namespace mxablate::contract
