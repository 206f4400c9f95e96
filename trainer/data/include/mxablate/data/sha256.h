// SHA-256 (FIPS 180-4) for the source and shard checksums in a data manifest. Written here so
// that the data library needs no crypto dependency on either machine.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace mxablate::data {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t bytes);
  void update(std::string_view s) { update(s.data(), s.size()); }
  // Lower-case hex digest; the object must not be updated afterwards.
  std::string hex_digest();

 private:
  void compress(const uint8_t* block);
  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

// Digest of a whole file; throws std::runtime_error naming the file if it cannot be read.
std::string sha256_file(const std::string& path);

}  // namespace mxablate::data
