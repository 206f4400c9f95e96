// Runs trainer processes on this machine in slots: N CPU slots, or K slots per GPU with the GPU
// selected through CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES. Children are started with
// Boost.Process, stdout/stderr appended to RUN_DIR/stdout.log and stderr.log, each in its own
// process group (Ctrl-C on the terminal reaches only the orchestrator, which then stops them in
// order) and with a parent-death signal, so an orchestrator killed with SIGKILL does not leave
// trainers running unsupervised: they receive SIGTERM and checkpoint.
//
// A run of N ranks (parallel.data N) takes N slots at once; GPU slots on N distinct GPUs (NCCL
// cannot put two ranks of one communicator on one GPU), its CUDA_VISIBLE_DEVICES /
// HIP_VISIBLE_DEVICES the comma list of those GPUs in slot order (rank i uses the i-th). The
// trainer is still one child — a launcher that starts the ranks itself — so its process group
// holds the ranks: stop, kill and recover signal the group, and the ranks must stay in it.
#pragma once

#include <chrono>
#include <optional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "mxablate/orchestrator/executor.h"

namespace mxablate::orchestrator {

struct Slot {
  std::string label;   // "cpu0", "gpu1.0"
  std::string device;  // "cpu", "cuda:1"
  std::map<std::string, std::string> env;  // set for the child
  std::optional<int> gpu;  // the GPU a GPU slot is on: the ranks of one run need distinct ones
};

// The slot an attempt of several ranks runs in, from the slots it takes (in order): labels
// joined with '+' ("gpu0.0+gpu1.0"; beyond 8 slots cut to "cpu0+cpu1+cpu2+…+cpu15 (16 slots)"),
// devices too ("cuda:0+cuda:1"; CPU slots: "cpu"), CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES the comma list
// of their GPUs, any other variable (OMP_NUM_THREADS: per rank) as the first slot has it.
Slot combine_slots(const std::vector<Slot>& parts);

// The most ranks one run can get from these slots: GPU slots, the number of distinct GPUs; CPU
// slots, the number of slots.
int max_ranks_of(const std::vector<Slot>& slots);

// CPU slots share the machine's cores: unless OMP_NUM_THREADS is already set, each slot's
// trainer gets max(1, cores / count) threads, so N parallel runs do not oversubscribe the CPU
// (a run of N ranks takes N slots: each rank gets one slot's threads).
std::vector<Slot> cpu_slots(int count, unsigned cores = 0 /* 0: this machine's */);
std::vector<Slot> gpu_slots(const std::vector<int>& gpus, int per_gpu);

class LocalExecutor : public Executor {
 public:
  explicit LocalExecutor(std::vector<Slot> slots);
  ~LocalExecutor() override;  // kills what still runs (the sweep loop stops them first)

  std::string name() const override { return "local"; }
  size_t capacity() const override { return slots_.size(); }
  size_t running() const override { return children_.size(); }
  bool fits(const std::vector<int>& ranks) const override;
  // GPU slots: the number of distinct GPUs; CPU slots: the number of slots.
  int max_ranks() const override;
  Launched launch(const LaunchRequest& request) override;
  std::vector<AttemptExit> collect_exits() override;
  void request_stop(const std::string& run_id) override;
  void kill(const std::string& run_id) override;
  bool recover(const results::OpenAttempt& attempt, std::chrono::milliseconds grace) override;
  // Prestart (executor.h): at most one standby per busy slot, started with the slot's
  // environment and MXABLATE_STANDBY_FD (the trainer's end of a socket pair; ours is closed on
  // exec in every other child, so only our own death or abandon() ends it with end of file).
  // When the slot's trainer exits, or earlier through hand_over, the slot passes to its standby
  // and stays busy until release.
  bool standby_room() const override;
  Launched prestart(const LaunchRequest& request) override;
  bool standby_ready(const std::string& run_id) const override;
  void release(const std::string& run_id) override;
  std::vector<std::string> standbys_behind(const std::string& run_id) const override;
  void hand_over(const std::string& run_id, const std::string& standby) override;
  void abandon(const std::string& run_id) override;

  // The pid of a running attempt (tests use it to kill a trainer behind the executor's back).
  std::optional<int> pid_of(const std::string& run_id) const;

 private:
  struct Child;
  void signal_child(const std::string& run_id, int sig);
  // Free slots for an attempt of `ranks` ranks, marked in `busy`; empty when it does not fit.
  std::vector<size_t> pick_slots(std::vector<bool>& busy, int ranks) const;
  // Starts the trainer in `slot` (standby_fd >= 0: as a standby holding that descriptor).
  std::unique_ptr<Child> spawn(const LaunchRequest& r, const Slot& slot, int standby_fd);
  Launched record(std::unique_ptr<Child> child, const Slot& slot);
  std::optional<size_t> standby_slot() const;

  std::vector<Slot> slots_;
  std::vector<bool> busy_;
  std::vector<std::string> standby_on_;  // per slot: the run id of the standby waiting for it
  std::string host_;
  std::map<std::string, std::unique_ptr<Child>> children_;
};

// The local host name (stored with attempts).
std::string local_host_name();

}  // namespace mxablate::orchestrator
