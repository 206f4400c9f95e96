// SHA-256 against the FIPS 180-4 test vectors and sha256sum-style file digests.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "catch.h"
#include "test_support.h"
#include "mxablate/data/sha256.h"

using mxablate::data::Sha256;

namespace {
std::string digest(const std::string& s) {
  Sha256 h;
  h.update(s);
  return h.hex_digest();
}
}  // namespace

TEST_CASE("SHA-256 matches the standard test vectors", "[data][sha256]") {
  CHECK(digest("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(digest("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(digest("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // One million 'a's, fed in uneven pieces to exercise the buffering.
  Sha256 h;
  const std::string chunk(997, 'a');
  size_t fed = 0;
  while (fed + chunk.size() <= 1000000) {
    h.update(chunk);
    fed += chunk.size();
  }
  h.update(std::string(1000000 - fed, 'a'));
  CHECK(h.hex_digest() == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("sha256_file digests a file's bytes and names a missing file", "[data][sha256]") {
  const auto path = std::filesystem::temp_directory_path() / "mxablate_sha256_test.txt";
  std::ofstream(path) << "abc";
  CHECK(mxablate::data::sha256_file(path.string()) ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  std::filesystem::remove(path);
  CHECK_THROWS_WITH(mxablate::data::sha256_file(path.string()),
                    has_text("mxablate_sha256_test.txt"));
}
