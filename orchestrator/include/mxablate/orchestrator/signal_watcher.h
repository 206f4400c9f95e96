// Turns SIGINT, SIGTERM and SIGCHLD into something the sweep loop can wait on: the handlers only
// write a byte to a self-pipe (async-signal-safe); the loop sleeps in poll() on that pipe, so it
// wakes at once when a trainer exits or the user presses Ctrl-C (or a watched event log grows,
// wait_for_readable), and otherwise after its poll interval. Installing it replaces the handlers; destroying it restores them.
#pragma once

#include <chrono>

namespace mxablate::orchestrator {

// What the sweep loop waits on; tests can supply their own.
class Waker {
 public:
  virtual ~Waker() = default;
  // Sleeps until woken (a signal) or `timeout` passes.
  virtual void wait_for(std::chrono::milliseconds timeout) = 0;
  // The same, also woken when descriptor `fd` becomes readable (fd < 0: none): the event logs
  // the loop watches for a run_end (log_watch.h). A waker that cannot wait on a descriptor
  // wakes after `timeout` as before.
  virtual void wait_for_readable(std::chrono::milliseconds timeout, int /*fd*/) {
    wait_for(timeout);
  }
  // How many stop requests (SIGINT/SIGTERM) have arrived so far.
  virtual int stop_requests() const = 0;
  // The signal of the first stop request (SIGINT or SIGTERM), 0 if none.
  virtual int first_stop_signal() const = 0;
};

class SignalWatcher : public Waker {
 public:
  SignalWatcher();
  ~SignalWatcher() override;
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

  void wait_for(std::chrono::milliseconds timeout) override;
  void wait_for_readable(std::chrono::milliseconds timeout, int fd) override;
  int stop_requests() const override;
  int first_stop_signal() const override;
};

}  // namespace mxablate::orchestrator
