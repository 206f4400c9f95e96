#include "mxablate/orchestrator/executor.h"

#include <csignal>
#include <fmt/format.h>

namespace mxablate::orchestrator {
namespace {

std::string signal_name(int sig) {
  switch (sig) {
    case SIGKILL: return "SIGKILL";
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGSEGV: return "SIGSEGV";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGHUP: return "SIGHUP";
    case SIGPIPE: return "SIGPIPE";
    case SIGXFSZ: return "SIGXFSZ";
    default: return fmt::format("signal {}", sig);
  }
}

}  // namespace

std::string AttemptExit::describe() const {
  if (signal) return fmt::format("killed by signal {} ({})", *signal, signal_name(*signal));
  if (exit_code) return fmt::format("exit code {}", *exit_code);
  return "ended without a known exit status";
}

}  // namespace mxablate::orchestrator
