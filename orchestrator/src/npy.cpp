#include "npy.h"

#include <cstring>
#include <fstream>
#include <regex>

namespace mxablate::npy {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw NpyError(path + ": " + what);
}

// Finds `'key': <value>` in the header dict and returns the raw value text.
std::string dict_value(const std::string& header, const std::string& key, const std::string& path) {
  const std::regex re("['\"]" + key + "['\"]\\s*:\\s*(\\([^)]*\\)|'[^']*'|\"[^\"]*\"|True|False)");
  std::smatch m;
  if (!std::regex_search(header, m, re)) fail(path, "the .npy header has no '" + key + "' entry");
  return m[1].str();
}

std::vector<int64_t> parse_shape(const std::string& text, const std::string& path) {
  std::vector<int64_t> dims;
  const std::string inner = text.substr(1, text.size() - 2);  // strip the parentheses
  size_t pos = 0;
  while (pos < inner.size()) {
    while (pos < inner.size() && (inner[pos] == ' ' || inner[pos] == ',')) ++pos;
    if (pos >= inner.size()) break;
    size_t end = pos;
    while (end < inner.size() && std::isdigit(static_cast<unsigned char>(inner[end]))) ++end;
    if (end == pos) fail(path, "the .npy shape " + text + " is not a tuple of integers");
    dims.push_back(std::stoll(inner.substr(pos, end - pos)));
    pos = end;
  }
  return dims;
}

void write_header(std::ofstream& out, const std::string& descr, int64_t rows, int64_t cols) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" +
                     std::to_string(rows) + ", " + std::to_string(cols) + "), }";
  // Magic (6) + version (2) + length (2) + dict + padding + '\n' is a multiple of 64.
  const size_t unpadded = kMagicLen + 4 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict.push_back('\n');
  out.write(kMagic, kMagicLen);
  const char version[2] = {1, 0};
  out.write(version, 2);
  const uint16_t len = static_cast<uint16_t>(dict.size());
  const char len_bytes[2] = {static_cast<char>(len & 0xFF), static_cast<char>(len >> 8)};
  out.write(len_bytes, 2);
  out.write(dict.data(), static_cast<std::streamsize>(dict.size()));
}

template <typename T>
void write_any(const std::string& path, const std::string& descr, const T* data, int64_t rows,
               int64_t cols) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error(path + ": cannot open for writing");
  write_header(out, descr, rows, cols);
  out.write(reinterpret_cast<const char*>(data),
            static_cast<std::streamsize>(sizeof(T) * static_cast<size_t>(rows * cols)));
  out.flush();
  if (!out) throw std::runtime_error(path + ": write failed (disk full?)");
}

}  // namespace

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t man = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {  // subnormal half: normalize
    int e = -1;
    do {
      ++e;
      man <<= 1;
    } while ((man & 0x400u) == 0);
    bits = sign | (static_cast<uint32_t>(112 - e) << 23) | ((man & 0x3FFu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

Matrix read_matrix(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open the file");
  char magic[kMagicLen] = {};
  in.read(magic, kMagicLen);
  if (in.gcount() != static_cast<std::streamsize>(kMagicLen) ||
      std::memcmp(magic, kMagic, kMagicLen) != 0)
    fail(path, "not a .npy file (bad magic string)");
  unsigned char version[2] = {};
  in.read(reinterpret_cast<char*>(version), 2);
  if (in.gcount() != 2) fail(path, "truncated .npy header");
  uint32_t header_len = 0;
  if (version[0] == 1) {
    unsigned char b[2] = {};
    in.read(reinterpret_cast<char*>(b), 2);
    if (in.gcount() != 2) fail(path, "truncated .npy header");
    header_len = b[0] | (b[1] << 8);
  } else if (version[0] == 2 || version[0] == 3) {
    unsigned char b[4] = {};
    in.read(reinterpret_cast<char*>(b), 4);
    if (in.gcount() != 4) fail(path, "truncated .npy header");
    header_len = b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<uint32_t>(b[3]) << 24);
  } else {
    fail(path, "unsupported .npy format version " + std::to_string(version[0]));
  }
  if (header_len > (1u << 20)) fail(path, "implausible .npy header length");
  std::string header(header_len, '\0');
  in.read(header.data(), header_len);
  if (in.gcount() != static_cast<std::streamsize>(header_len)) fail(path, "truncated .npy header");

  const std::string descr = dict_value(header, "descr", path);
  const std::string fortran = dict_value(header, "fortran_order", path);
  const std::string shape_text = dict_value(header, "shape", path);
  if (fortran == "True")
    fail(path, "Fortran-order arrays are not supported; save with numpy.ascontiguousarray");
  if (shape_text.front() != '(') fail(path, "the .npy shape is not a tuple");
  const std::vector<int64_t> shape = parse_shape(shape_text, path);
  if (shape.size() != 2)
    fail(path, "expected a 2-D array, got " + std::to_string(shape.size()) + "-D shape " +
                   shape_text);

  Matrix m;
  m.rows = shape[0];
  m.cols = shape[1];
  const std::string type = descr.substr(1, descr.size() - 2);
  size_t item = 0;
  if (type == "<f4") {
    m.dtype = "float32";
    item = 4;
  } else if (type == "<f2") {
    m.dtype = "float16";
    item = 2;
  } else {
    fail(path, "dtype '" + type + "' is not supported (expected little-endian float32 '<f4' or "
               "float16 '<f2')");
  }
  const int64_t count = m.rows * m.cols;
  std::vector<char> raw(static_cast<size_t>(count) * item);
  in.read(raw.data(), static_cast<std::streamsize>(raw.size()));
  if (in.gcount() != static_cast<std::streamsize>(raw.size()))
    fail(path, "truncated data: expected " + std::to_string(raw.size()) + " bytes for shape " +
                   shape_text + ", found " + std::to_string(in.gcount()));
  if (in.peek() != std::char_traits<char>::eof())
    fail(path, "unexpected bytes after the array data");
  m.data.resize(static_cast<size_t>(count));
  if (item == 4) {
    std::memcpy(m.data.data(), raw.data(), raw.size());
  } else {
    for (int64_t i = 0; i < count; ++i) {
      uint16_t h;
      std::memcpy(&h, raw.data() + 2 * i, 2);
      m.data[static_cast<size_t>(i)] = half_to_float(h);
    }
  }
  return m;
}

void write_matrix(const std::string& path, const float* data, int64_t rows, int64_t cols) {
  write_any(path, "<f4", data, rows, cols);
}

void write_matrix(const std::string& path, const uint8_t* data, int64_t rows, int64_t cols) {
  write_any(path, "|u1", data, rows, cols);
}

}  // namespace mxablate::npy
