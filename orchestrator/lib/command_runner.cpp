#include "mxablate/orchestrator/command_runner.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fmt/format.h>
#include <memory>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "mxablate/orchestrator/boost_process.h"

namespace mxablate::orchestrator {
namespace {

namespace fs = std::filesystem;

// Dispositions the orchestrator changed (SIGXFSZ ignored, SIGPIPE) must not leak into the child.
struct DefaultSignals {
  template <typename Exec>
  void operator()(Exec&) const {
    ::signal(SIGPIPE, SIG_DFL);
    ::signal(SIGXFSZ, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
  }
};

struct FileCloser {
  void operator()(std::FILE* f) const {
    if (f) std::fclose(f);
  }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

std::string read_all(std::FILE* f) {
  std::string s;
  std::rewind(f);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  return s;
}

}  // namespace

std::optional<fs::path> find_program(const std::string& name) {
  if (name.empty()) return std::nullopt;
  if (name.find('/') != std::string::npos) {
    if (::access(name.c_str(), X_OK) == 0) return fs::path(name);
    return std::nullopt;
  }
  std::string dirs = std::getenv("PATH") ? std::getenv("PATH") : "";
  dirs += ":/usr/bin:/usr/sbin:/usr/local/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t colon = dirs.find(':', start);
    const std::string dir =
        dirs.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    if (!dir.empty()) {
      const fs::path candidate = fs::path(dir) / name;
      std::error_code ec;
      if (fs::is_regular_file(candidate, ec) && ::access(candidate.c_str(), X_OK) == 0)
        return candidate;
    }
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return std::nullopt;
}

CommandOutput run_command(const fs::path& program, const std::vector<std::string>& args,
                          std::chrono::milliseconds timeout) {
  File out(std::tmpfile()), err(std::tmpfile());
  if (!out || !err) throw std::runtime_error("cannot create a temporary file for a command's output");
  bp::child child;
  try {
    child = bp::child(program.string(), bp::args(args), bp::std_in < bp::null,
                      bp::std_out > out.get(), bp::std_err > err.get(),
                      bp::extend::on_exec_setup(DefaultSignals{}));
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("cannot run {}: {}", program.string(), e.what()));
  }
  CommandOutput result;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::microseconds(500);
  while (true) {
    std::error_code ec;
    if (!child.running(ec) || ec) break;
    if (std::chrono::steady_clock::now() > deadline) {
      result.timed_out = true;
      child.terminate(ec);  // SIGKILL, and reaps it
      break;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(20));
  }
  if (!result.timed_out) {
    const int status = child.native_exit_code();
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  result.out = read_all(out.get());
  result.err = read_all(err.get());
  return result;
}

}  // namespace mxablate::orchestrator
