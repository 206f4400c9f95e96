// A prepared data directory is written whole or not at all (docs/design.md §4 "Reading input"):
// `data prepare` and `data import` write into OUT.partial and rename it to OUT only when
// complete; any error, in any thread, removes OUT.partial. One definition for both commands.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace mxablate::data {

// Whether `path` is `dir` or lies under it (both resolved as far as they exist).
bool is_within(const std::filesystem::path& path, const std::filesystem::path& dir);

class PartialDir {
 public:
  // Refuses (std::invalid_argument naming --out) an existing OUT without `force`, and an OUT or
  // OUT.partial that holds one of `sources` (replacing it would delete the input); then makes
  // an empty OUT.partial.
  PartialDir(const std::string& out_dir, bool force, const std::vector<std::string>& sources);
  ~PartialDir();  // removes OUT.partial unless published
  PartialDir(const PartialDir&) = delete;
  PartialDir& operator=(const PartialDir&) = delete;
  const std::filesystem::path& path() const { return partial_; }
  // Replaces OUT with the complete OUT.partial.
  void publish();

 private:
  std::filesystem::path out_, partial_;
  bool published_ = false;
};

}  // namespace mxablate::data
