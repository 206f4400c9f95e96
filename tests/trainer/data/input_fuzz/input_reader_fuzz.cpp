// libFuzzer target for the data commands' one input reader (input_file.h, text_documents.h):
// any bytes, read as plain text, JSON lines or gzip, must give documents within the limits or one
// std::invalid_argument line naming the file — never a crash, a sanitizer report, another
// exception, a hang or memory beyond the limits.
//
// Input: one byte choosing the file's kind (low 2 bits: 0 .txt, 1 .jsonl, 2 .jsonl.gz written
// as given, 3 .jsonl.gz: the rest gzip-compressed here and cut at a point the next two bytes
// choose), then the file's bytes.
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "mxablate/data/text_documents.h"

using namespace mxablate::data;

namespace {

// The directory each input is written to (in memory where /dev/shm exists), removed at exit.
struct ScratchDir {
  std::string path;
  ScratchDir() {
    const std::filesystem::path shm("/dev/shm");
    const auto base = std::filesystem::exists(shm) ? shm : std::filesystem::temp_directory_path();
    path = (base / ("mxablate_input_fuzz_" + std::to_string(::getpid()))).string();
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};

const std::string& scratch_dir() {
  static const ScratchDir dir;
  return dir.path;
}

std::string gzip(const uint8_t* data, size_t size) {
  uLongf bound = compressBound(static_cast<uLong>(size)) + 64;
  std::string out(bound, '\0');
  z_stream z{};
  deflateInit2(&z, 6, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY);
  z.next_in = const_cast<Bytef*>(data);
  z.avail_in = static_cast<uInt>(size);
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  static const char* names[] = {"in.txt", "in.jsonl", "in.jsonl.gz", "in.jsonl.gz"};
  const int kind = data[0] & 3;
  const std::string path = scratch_dir() + "/" + names[kind];
  std::string bytes(reinterpret_cast<const char*>(data + 3), size - 3);
  if (kind == 3) {
    bytes = gzip(data + 3, size - 3);
    const size_t cut = (data[1] | (size_t{data[2]} << 8)) % (bytes.size() + 1);
    if (data[1] & 1) bytes.resize(cut);  // half the time: cut short
  }
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  TextLimits limits;
  limits.max_line_bytes = 4096;
  limits.max_document_bytes = 4096;
  limits.max_run_bytes = 64;
  try {
    DocumentReader reader(path, limits);
    std::string doc;
    while (reader.next(doc)) {
      if (doc.empty() || doc.size() > limits.max_document_bytes) std::abort();
      std::string joined;
      for (const auto segment : encoding_segments(doc, limits)) joined += segment;
      if (joined != doc) std::abort();
      for (const auto& piece : split_for_tokenizer_training(doc, 100))
        if (piece.empty() || piece.size() > 100) std::abort();
    }
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    if (what.find('\n') != std::string::npos) std::abort();  // errors are one line
    if (what.rfind(path, 0) != 0) std::abort();              // and name the file
  }
  return 0;
}
