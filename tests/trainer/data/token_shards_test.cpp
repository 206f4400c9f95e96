// Token shards: round trips in both token widths, reads across shard boundaries, and shards that
// were cut short are rejected by name.
#include <filesystem>
#include <fstream>
#include <vector>

#include "catch.h"
#include "test_support.h"
#include "mxablate/data/token_shards.h"

using namespace mxablate::data;
namespace fs = std::filesystem;

namespace {
fs::path fresh_dir(const char* name) {
  const fs::path dir = fs::temp_directory_path() / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::vector<int32_t> ramp(int32_t n, int32_t start, int32_t modulo) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = (start + i * 7) % modulo;
  return v;
}
}  // namespace

TEST_CASE("Shards round-trip 16- and 32-bit tokens", "[data][shards]") {
  const fs::path dir = fresh_dir("mxablate_shards_roundtrip");
  for (int64_t vocab : {int64_t{300}, int64_t{65536}, int64_t{100000}}) {
    const std::string path = (dir / ("v" + std::to_string(vocab) + ".bin")).string();
    const auto tokens = ramp(5000, 3, static_cast<int32_t>(vocab));
    {
      TokenShardWriter w(path, vocab);
      w.append(std::span<const int32_t>(tokens.data(), 1234));
      w.append(std::span<const int32_t>(tokens.data() + 1234, tokens.size() - 1234));
      CHECK(w.bytes_per_token() == (vocab <= 65536 ? 2 : 4));
      w.close();
    }
    CHECK(fs::file_size(path) == static_cast<uintmax_t>(kShardHeaderBytes + 5000 * (vocab <= 65536 ? 2 : 4)));
    TokenShard shard(path);
    CHECK(shard.size() == 5000);
    CHECK(shard.vocab_size() == vocab);
    std::vector<int32_t> back(5000);
    shard.read(0, back);
    CHECK(back == tokens);
    CHECK(shard.at(4999) == tokens[4999]);
  }
}

TEST_CASE("A stream reads across shard boundaries, empty shards included", "[data][shards]") {
  const fs::path dir = fresh_dir("mxablate_shards_stream");
  const auto all = ramp(1000, 0, 512);
  const std::vector<std::pair<size_t, size_t>> parts = {{0, 300}, {300, 300}, {300, 650}, {650, 1000}};
  std::vector<std::string> paths;
  for (size_t i = 0; i < parts.size(); ++i) {
    paths.push_back((dir / ("s" + std::to_string(i) + ".bin")).string());
    TokenShardWriter w(paths.back(), 512);
    w.append(std::span<const int32_t>(all.data() + parts[i].first, parts[i].second - parts[i].first));
    w.close();
  }
  TokenStream stream(paths);
  CHECK(stream.size() == 1000);
  for (int64_t start : {0, 250, 299, 300, 640, 990}) {
    std::vector<int32_t> out(10);
    stream.read(start, out);
    CHECK(std::equal(out.begin(), out.end(), all.begin() + start));
  }
  std::vector<int32_t> everything(1000);
  stream.read(0, everything);
  CHECK(everything == all);
  std::vector<int32_t> past(11);
  CHECK_THROWS_AS(stream.read(990, past), std::out_of_range);
}

TEST_CASE("Malformed shards are rejected with the file's name", "[data][shards]") {
  const fs::path dir = fresh_dir("mxablate_shards_bad");
  const std::string path = (dir / "cut.bin").string();
  {
    TokenShardWriter w(path, 512);
    const auto t = ramp(100, 0, 512);
    w.append(t);
    w.close();
  }
  fs::resize_file(path, fs::file_size(path) - 2);
  CHECK_THROWS_WITH(TokenShard(path), has_text("cut.bin") &&
                                          has_text("truncated"));
  std::ofstream(dir / "junk.bin") << "not a shard at all, just some text here";
  CHECK_THROWS_WITH(TokenShard((dir / "junk.bin").string()), has_text("bad magic"));
  TokenShardWriter w((dir / "oov.bin").string(), 10);
  const std::vector<int32_t> bad = {3, 10};
  CHECK_THROWS_AS(w.append(bad), std::invalid_argument);
}
