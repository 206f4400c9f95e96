#include "checkpoint_files.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "catch.h"

namespace mxablate::test {
namespace {

namespace fs = std::filesystem;

std::string bytes_of(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::set<std::string> names_in(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

uint32_t little_endian(const std::string& s, size_t at, int bytes) {
  uint32_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + static_cast<size_t>(i)]);
  return v;
}

// The records of a LibTorch archive (a zip of stored, uncompressed entries), in file order.
std::vector<std::pair<std::string, std::string>> zip_records(const std::string& zip) {
  std::vector<std::pair<std::string, std::string>> records;
  size_t at = 0;
  while (at + 30 <= zip.size() && little_endian(zip, at, 4) == 0x04034b50) {
    REQUIRE(little_endian(zip, at + 8, 2) == 0);  // stored
    const uint32_t size = little_endian(zip, at + 18, 4);
    const uint32_t name_len = little_endian(zip, at + 26, 2), extra_len = little_endian(zip, at + 28, 2);
    const size_t data = at + 30 + name_len + extra_len;
    REQUIRE(data + size <= zip.size());
    records.emplace_back(zip.substr(at + 30, name_len), zip.substr(data, size));
    at = data + size;
  }
  REQUIRE_FALSE(records.empty());
  return records;
}

void check_same_optimizer_archive(const fs::path& a, const fs::path& b) {
  const auto ra = zip_records(bytes_of(a)), rb = zip_records(bytes_of(b));
  REQUIRE(ra.size() == rb.size());
  std::multiset<std::string> data_a, data_b;
  for (size_t i = 0; i < ra.size(); ++i) {
    CHECK(ra[i].first == rb[i].first);
    if (ra[i].first.find("/data/") != std::string::npos) {
      data_a.insert(ra[i].second);
      data_b.insert(rb[i].second);
    } else if (ra[i].first.size() > 9 && ra[i].first.compare(ra[i].first.size() - 9, 9, "/data.pkl") == 0) {
      CHECK(ra[i].second.size() == rb[i].second.size());  // the same structure and memoization
    }
  }
  CHECK(data_a == data_b);
}

nlohmann::json state_without_checksums(const fs::path& file) {
  std::ifstream in(file);
  nlohmann::json j = nlohmann::json::parse(in);
  j.erase("checksum");
  for (auto& [name, f] : j["files"].items()) f.erase("sha256");
  return j;
}

}  // namespace

void check_same_checkpoints(const std::string& run_a, const std::string& run_b) {
  const fs::path ca = fs::path(run_a) / "checkpoints", cb = fs::path(run_b) / "checkpoints";
  REQUIRE(names_in(ca) == names_in(cb));
  REQUIRE_FALSE(names_in(ca).empty());
  for (const std::string& step : names_in(ca)) {
    REQUIRE(names_in(ca / step) == names_in(cb / step));
    for (const std::string& file : names_in(ca / step)) {
      INFO(step << "/" << file);
      const fs::path a = ca / step / file, b = cb / step / file;
      if (file == "optimizer.pt") check_same_optimizer_archive(a, b);
      else if (file == "rng.pt") CHECK(fs::file_size(a) == fs::file_size(b));
      else if (file == "state.json") CHECK(state_without_checksums(a) == state_without_checksums(b));
      else CHECK(bytes_of(a) == bytes_of(b));  // model.pt, optimizer-shard-*.pt
    }
  }
}

}  // namespace mxablate::test
