// libFuzzer target for the Megatron-LM index reader: any pair of files must give either a
// dataset whose arrays are consistent (read back here exactly as the import reads them) or one
// std::invalid_argument line naming the file — never a crash, a sanitizer report, an unexpected
// exception, a hang or an allocation the files do not pay for.
//
// Input: a little-endian uint16 n, then n bytes of PREFIX.idx, then PREFIX.bin.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "mxablate/data/megatron_index.h"

using namespace mxablate::data;

namespace {

// The pair of files each input is written to (in memory where /dev/shm exists), removed at exit.
struct ScratchPrefix {
  std::string path;
  ScratchPrefix() {
    const std::filesystem::path shm("/dev/shm");
    const auto dir = std::filesystem::exists(shm) ? shm : std::filesystem::temp_directory_path();
    path = (dir / ("mxablate_megatron_fuzz_" + std::to_string(::getpid()))).string();
  }
  ~ScratchPrefix() {
    std::error_code ignored;
    std::filesystem::remove(path + ".idx", ignored);
    std::filesystem::remove(path + ".bin", ignored);
  }
};

const std::string& prefix() {
  static const ScratchPrefix p;
  return p.path;
}

void write(const std::string& path, const uint8_t* data, size_t size) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const size_t idx_bytes = std::min<size_t>(data[0] | (size_t{data[1]} << 8), size - 2);
  write(prefix() + ".idx", data + 2, idx_bytes);
  write(prefix() + ".bin", data + 2 + idx_bytes, size - 2 - idx_bytes);
  try {
    const MegatronIndexedDataset ds(prefix());
    IntArrayReader lengths = ds.sequence_lengths();
    IntArrayReader indices = ds.document_indices();
    int64_t first = indices.next(), covered = 0;
    if (first != 0) std::abort();
    for (int64_t d = 0; d < ds.documents(); ++d) {
      const int64_t end = indices.next();
      if (end < first || end > ds.sequences()) std::abort();
      for (int64_t s = first; s < end; ++s) {
        const int64_t length = lengths.next();
        if (length < 0) std::abort();
        covered += length * ds.dtype().bytes;
      }
      first = end;
    }
    if (first != ds.sequences() || covered != ds.bin().size()) std::abort();
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    if (what.find('\n') != std::string::npos) std::abort();  // errors are one line
    if (what.rfind(prefix(), 0) != 0) std::abort();          // and name the file
  }
  return 0;
}
