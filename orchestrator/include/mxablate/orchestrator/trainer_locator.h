// Finds the trainer binary: --trainer, else $MXABLATE_TRAINER, else mxablate-train next to the
// running mxablate (build/bin/ holds both). A missing binary is one error naming every place
// looked at, raised before anything is launched.
#pragma once

#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>

namespace mxablate::orchestrator {

struct TrainerNotFound : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::filesystem::path find_trainer(const std::optional<std::string>& option);

// The directory of the running executable (/proc/self/exe).
std::filesystem::path own_directory();

}  // namespace mxablate::orchestrator
