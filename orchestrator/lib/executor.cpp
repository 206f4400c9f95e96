#include "mxablate/orchestrator/executor.h"

#include <csignal>
#include <ctime>
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

std::string executor_timestamp() {
  const std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", std::localtime(&now));
  return buf;
}

std::string AttemptExit::describe() const {
  std::string s = signal      ? fmt::format("killed by signal {} ({})", *signal, signal_name(*signal))
                  : exit_code ? fmt::format("exit code {}", *exit_code)
                              : std::string("ended without a known exit status");
  if (!detail.empty()) s += "; " + detail;
  return s;
}

std::vector<LaunchResult> Executor::launch_batch(const std::vector<LaunchRequest>& requests) {
  std::vector<LaunchResult> results;
  for (const LaunchRequest& r : requests) {
    try {
      results.push_back({launch(r), ""});
    } catch (const LaunchError& e) {
      results.push_back({std::nullopt, e.what()});
    }
  }
  return results;
}

}  // namespace mxablate::orchestrator
