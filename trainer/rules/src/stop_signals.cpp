#include "mxablate/trainer/rules/stop_signals.h"

#include <csignal>

namespace mxablate::trainer {
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void record_stop_signal(int signo) { g_stop_signal = signo; }

}  // namespace

void install_stop_signal_handlers() {
  struct sigaction action {};
  action.sa_handler = record_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // blocking writes and reads resume; the loop polls the flag
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
}

int stop_signal_received() { return g_stop_signal; }

}  // namespace mxablate::trainer
