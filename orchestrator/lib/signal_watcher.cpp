#include "mxablate/orchestrator/signal_watcher.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <stdexcept>
#include <string>

namespace mxablate::orchestrator {
namespace {

int g_pipe[2] = {-1, -1};
std::atomic<int> g_stop_requests{0};
std::atomic<int> g_first_stop_signal{0};
struct sigaction g_previous[3];
constexpr int kSignals[3] = {SIGINT, SIGTERM, SIGCHLD};

void on_signal(int sig) {
  const int saved = errno;
  if (sig == SIGINT || sig == SIGTERM) {
    int expected = 0;
    g_first_stop_signal.compare_exchange_strong(expected, sig);
    g_stop_requests.fetch_add(1);
  }
  const char byte = 1;
  [[maybe_unused]] const ssize_t n = ::write(g_pipe[1], &byte, 1);  // full pipe: already woken
  errno = saved;
}

}  // namespace

SignalWatcher::SignalWatcher() {
  if (g_pipe[0] != -1) throw std::logic_error("only one SignalWatcher at a time");
  if (::pipe2(g_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
    throw std::runtime_error(std::string("cannot create a pipe: ") + std::strerror(errno));
  g_stop_requests = 0;
  g_first_stop_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // children are reaped by Boost.Process, so no SA_NOCLDWAIT
  for (int i = 0; i < 3; ++i) ::sigaction(kSignals[i], &sa, &g_previous[i]);
}

SignalWatcher::~SignalWatcher() {
  for (int i = 0; i < 3; ++i) ::sigaction(kSignals[i], &g_previous[i], nullptr);
  ::close(g_pipe[0]);
  ::close(g_pipe[1]);
  g_pipe[0] = g_pipe[1] = -1;
}

void SignalWatcher::wait_for(std::chrono::milliseconds timeout) { wait_for_readable(timeout, -1); }

void SignalWatcher::wait_for_readable(std::chrono::milliseconds timeout, int fd) {
  pollfd p[2] = {{g_pipe[0], POLLIN, 0}, {fd, POLLIN, 0}};  // a negative fd is skipped by poll
  ::poll(p, 2, static_cast<int>(timeout.count()));
  char drain[64];
  while (::read(g_pipe[0], drain, sizeof drain) > 0) {
  }
}

int SignalWatcher::stop_requests() const { return g_stop_requests.load(); }
int SignalWatcher::first_stop_signal() const { return g_first_stop_signal.load(); }

}  // namespace mxablate::orchestrator
