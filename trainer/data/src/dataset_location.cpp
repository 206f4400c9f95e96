#include "mxablate/data/dataset_location.h"

#include <cstdlib>

namespace mxablate::data {

std::string dataset_dir(const std::string& dataset) {
  if (dataset != kDefaultDataset) return dataset;
  const char* env = std::getenv("MXABLATE_DEFAULT_DATASET");
  return env && *env ? env : std::string(MXABLATE_SOURCE_DIR) + "/data/default";
}

}  // namespace mxablate::data
