// Comparing two runs' checkpoints file by file, for the tests of checkpoints written beside
// training against checkpoints written in place (docs/design.md §4, "Checkpoints and exact
// resume").
#pragma once

#include <string>

namespace mxablate::test {

// CHECKs that every kept checkpoint of `run_a` holds what `run_b`'s holds: the same checkpoint
// directories and file names; model.pt and each optimizer shard byte for byte; optimizer.pt the
// same archive records, the same pickle length and the same moments (LibTorch keys its state by
// the parameters' addresses in the writing process, and orders it by them, so two processes
// never write the same bytes); rng.pt of the same size (LibTorch's CPU generator state differs
// from process to process); state.json equal but for the files' checksums and its own.
void check_same_checkpoints(const std::string& run_a, const std::string& run_b);

}  // namespace mxablate::test
