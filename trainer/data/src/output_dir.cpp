#include "mxablate/data/output_dir.h"

#include <stdexcept>

namespace mxablate::data {

namespace fs = std::filesystem;

bool is_within(const fs::path& path, const fs::path& dir) {
  const fs::path rel = fs::weakly_canonical(path).lexically_relative(fs::weakly_canonical(dir));
  return !rel.empty() && *rel.begin() != "..";
}

PartialDir::PartialDir(const std::string& out_dir, bool force, const std::vector<std::string>& sources)
    : out_(out_dir), partial_(out_dir + ".partial") {
  std::error_code ec;
  if (fs::exists(out_, ec) && !force)
    throw std::invalid_argument("--out: " + out_dir + " already exists; remove it or pass --force");
  for (const fs::path& dir : {out_, partial_})
    for (const auto& source : sources)
      if (is_within(source, dir))
        throw std::invalid_argument("--out: " + out_dir + " holds the source " + source +
                                    ", which writing the output would delete");
  fs::remove_all(partial_);
  fs::create_directories(partial_);
}

PartialDir::~PartialDir() {
  if (published_) return;
  std::error_code ignored;
  fs::remove_all(partial_, ignored);
}

void PartialDir::publish() {
  if (fs::exists(out_)) fs::remove_all(out_);
  fs::rename(partial_, out_);
  published_ = true;
}

}  // namespace mxablate::data
