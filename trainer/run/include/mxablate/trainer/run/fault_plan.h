// The faults a test asks mxablate-train to suffer (its hidden --debug-* options), kept apart
// from the run's options: a production run has an empty plan, and the loop asks the plan, never
// a knob, whether something happens now (docs/reliability.md, the fault tests).
#pragma once

#include <cstdint>

namespace mxablate::trainer {

struct FaultPlan {
  // Each acts at optimizer step N (1-based; -1: off):
  int64_t inject_nonfinite_at_step = -1;  // a NaN weight before step N's forward pass
  int64_t signal_at_step = -1;            // raise(SIGTERM) after step N
  // SIGKILL after step N, flushing nothing, once every rank's checkpoint write in flight has
  // finished: what was on disk when checkpoints were written in place.
  int64_t crash_at_step = -1;
  // _exit(137) on the checkpoint writer's thread while checkpoint N is written: its files are in
  // the temporary directory, state.json and the rename are not done (training may be steps on).
  int64_t crash_writing_checkpoint = -1;
  // _exit(137) on rank 0's writer thread just after checkpoint N is published, before the
  // training thread has recorded its event.
  int64_t crash_after_checkpoint_published = -1;
  int fault_rank = -1;  // the rank of a data-parallel run the faults act on (-1: every rank)

  bool acts_on(int rank) const { return fault_rank < 0 || fault_rank == rank; }
};

}  // namespace mxablate::trainer
