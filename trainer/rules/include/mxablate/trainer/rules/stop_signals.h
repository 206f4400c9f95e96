// SIGTERM / SIGINT handling: the handler only records the signal; the training loop polls it at
// step boundaries, writes a checkpoint and exits with status 4 (interrupted).
#pragma once

namespace mxablate::trainer {

void install_stop_signal_handlers();
// The signal number received (SIGTERM or SIGINT), or 0.
int stop_signal_received();

}  // namespace mxablate::trainer
