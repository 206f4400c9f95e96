// Where a run config's `data.dataset` points, decided in one place for the trainer (which opens
// it) and the orchestrator (which checks it before launching anything): "default" is
// $MXABLATE_DEFAULT_DATASET or this checkout's data/default (built by scripts/build-corpus.sh);
// anything else is the directory `mxablate data prepare --out DIR` wrote.
#pragma once

#include <string>

namespace mxablate::data {

inline constexpr const char* kDefaultDataset = "default";

// The directory `dataset` names (not checked).
std::string dataset_dir(const std::string& dataset);

}  // namespace mxablate::data
