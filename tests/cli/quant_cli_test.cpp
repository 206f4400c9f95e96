// `mxablate quant` end to end: real .npy files written by numpy in, results checked against the
// CPU reference and against an independent decode of the codes and scales it writes; and every
// malformed-file case gives exit code 2 with one clear line.
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "catch.h"
#include "mxablate/kernels/quantize.h"
#include "npy.h"
#include "process_util.h"

using namespace mxablate;
using test::run_command;
using test::TempDir;

namespace {

const std::string kBin = MXABLATE_BIN;
// Debian's interpreter, where python3-numpy lives (another python3 may come first on PATH).
const std::string kPython = "/usr/bin/python3";

// These tests need numpy to write and read real .npy files; the GPU machine's image has none.
bool have_numpy() {
  static const bool yes = run_command(kPython + " -c 'import numpy'").exit_code == 0;
  return yes;
}
#define REQUIRE_NUMPY() \
  if (!have_numpy()) MXABLATE_SKIP(kPython + " has no numpy (Debian: python3-numpy)")

void numpy(const std::string& code) {
  const auto r = run_command(kPython + " -c \"import numpy as np\n" + code + "\"");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// Independent decode of the files `mxablate quant --codes --scales` writes (MXFP4).
float decode_mxfp4(uint8_t code, uint8_t scale) {
  static const float magnitude[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  if (scale == 0xFF) return NAN;
  const float v = magnitude[code & 7] * std::ldexp(1.0f, scale - 127);
  return (code & 8) ? -v : v;
}

}  // namespace

TEST_CASE("mxablate quant round trip on numpy files, both axes, float32 and float16") {
  REQUIRE_NUMPY();
  TempDir dir("mxablate_quant_cli");
  numpy("rng = np.random.default_rng(0)\n"
        "x = rng.standard_normal((64, 96)).astype(np.float32)\n"
        "x[:, 5] *= 40\n"
        "x[3, 40] = np.nan\n"
        "np.save('" + dir / "x.npy" + "', x)\n"
        "np.save('" + dir / "xh.npy" + "', x.astype(np.float16))");
  for (const std::string input : {"x.npy", "xh.npy"}) {
    for (const std::string axis : {"rows", "cols"}) {
      const auto r = run_command(kBin + " quant --in " + dir / input + " --out " + dir / "q.npy" +
                                 " --codes " + dir / "c.npy" + " --scales " + dir / "s.npy" +
                                 " --axis " + axis + " --json");
      INFO(r.output);
      REQUIRE(r.exit_code == 0);
      const auto report = nlohmann::json::parse(r.output);
      CHECK(report["elements"] == 64 * 96);
      CHECK(report["nonfinite_blocks"] == 1);  // the NaN's block

      const npy::Matrix x = npy::read_matrix(dir / input);
      const npy::Matrix q = npy::read_matrix(dir / "q.npy");
      REQUIRE(q.rows == 64);
      REQUIRE(q.cols == 96);

      // Same bits as calling the library directly.
      std::vector<float> expected(x.data.size());
      kernels::QuantOutputs out;
      out.dequant = expected.data();
      const auto axis_enum = axis == "rows" ? kernels::Axis::kRows : kernels::Axis::kCols;
      const auto t = kernels::quantize(x.data.data(), 64, 96, axis_enum, kernels::QuantSpec{}, {}, out);
      CHECK(std::memcmp(expected.data(), q.data.data(), expected.size() * 4) == 0);
      CHECK(report["relative_error"].get<double>() == Approx(t.relative_error()));

      // Codes and scales, loaded by numpy and decoded independently, give q back.
      const auto sr = run_command(kPython + " -c \"import numpy as np; c = np.load('" +
                                  dir / "c.npy" + "'); s = np.load('" + dir / "s.npy" +
                                  "'); print(c.dtype, c.shape, s.dtype, s.shape)\"");
      INFO(sr.output);
      CHECK(sr.output == (axis == "rows" ? "uint8 (64, 96) uint8 (64, 3)\n"
                                         : "uint8 (64, 96) uint8 (2, 96)\n"));
      const auto codes = run_command(kPython + " -c \"import numpy as np; import sys; "
                                     "sys.stdout.buffer.write(np.load('" + dir / "c.npy" +
                                     "').tobytes() + np.load('" + dir / "s.npy" + "').tobytes())\"");
      REQUIRE(codes.output.size() == 64 * 96 + 64 * 96 / 32);
      for (int r2 = 0; r2 < 64; ++r2) {
        for (int c = 0; c < 96; ++c) {
          const uint8_t code = static_cast<uint8_t>(codes.output[r2 * 96 + c]);
          const size_t scale_index = axis == "rows" ? r2 * 3 + c / 32 : (r2 / 32) * 96 + c;
          const uint8_t scale = static_cast<uint8_t>(codes.output[64 * 96 + scale_index]);
          const float v = decode_mxfp4(code, scale);
          const float got = q.data[r2 * 96 + c];
          if (std::isnan(v)) {
            CHECK(std::isnan(got));
          } else {
            CHECK(v == got);
          }
        }
      }
    }
  }
}

TEST_CASE("mxablate quant: stochastic rounding is reproducible from the command line") {
  REQUIRE_NUMPY();
  TempDir dir("mxablate_quant_sr");
  numpy("np.save('" + dir / "x.npy" + "', np.random.default_rng(1).standard_normal((32, 64)).astype(np.float32))");
  auto run = [&](const std::string& out, const std::string& step) {
    const auto r = run_command(kBin + " quant --in " + dir / "x.npy" + " --out " + dir / out +
                               " --rounding stochastic --seed 7 --step " + step +
                               " --hadamard per-step-random --hadamard-size 32 --format nvfp4");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    return npy::read_matrix(dir / out).data;
  };
  const auto a = run("a.npy", "3");
  const auto b = run("b.npy", "3");
  const auto c = run("c.npy", "4");
  CHECK(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
  CHECK(std::memcmp(a.data(), c.data(), a.size() * 4) != 0);
}

TEST_CASE("mxablate quant: scale rule mse and the SR pre-scale give the library's bits") {
  REQUIRE_NUMPY();
  TempDir dir("mxablate_quant_mse");
  numpy("x = np.random.default_rng(2).standard_normal((32, 64)).astype(np.float32)\n"
        "x[:, 7] *= 30\n"
        "np.save('" + dir / "x.npy" + "', x)");
  const npy::Matrix x = npy::read_matrix(dir / "x.npy");
  for (const std::string format : {"mxfp4", "nvfp4"}) {
    const auto r = run_command(kBin + " quant --in " + dir / "x.npy" + " --out " + dir / "q.npy" +
                               " --format " + format + " --scale-rule mse --rounding stochastic" +
                               " --sr-prescale 0.75 --seed 5 --json");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const auto report = nlohmann::json::parse(r.output);
    CHECK(report["scale_rule"] == "mse");
    CHECK(report["sr_prescale"] == 0.75);
    kernels::QuantSpec spec;
    spec.format = *kernels::parse_quant_format(format);
    spec.scale_rule = kernels::ScaleRule::kMse;
    spec.rounding = kernels::Rounding::kStochastic;
    spec.sr_prescale = 0.75f;
    kernels::RngKey key;
    key.seed = 5;
    std::vector<float> expected(x.data.size());
    kernels::QuantOutputs out;
    out.dequant = expected.data();
    const auto t = kernels::quantize(x.data.data(), 32, 64, kernels::Axis::kRows, spec, key, out);
    const npy::Matrix q = npy::read_matrix(dir / "q.npy");
    CHECK(std::memcmp(expected.data(), q.data.data(), expected.size() * 4) == 0);
    CHECK(report["fraction_saturated"] == 0.0);
    CHECK(report["relative_error"].get<double>() == Approx(t.relative_error()));
  }
  for (const std::string bad : {"0", "1.5", "-0.75", "nan", "inf", "1e-9"}) {
    const auto r = run_command(kBin + " quant --in " + dir / "x.npy" + " --out " + dir / "q.npy" +
                               " --rounding stochastic --sr-prescale " + bad);
    INFO(bad << ": " << r.output);
    CHECK(r.exit_code == 2);
    CHECK(r.output.find("--sr-prescale: sr_prescale") != std::string::npos);
    CHECK(r.output.find("is not a finite number in [2^-24, 1]") != std::string::npos);
    CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
  }
}

TEST_CASE("malformed or unsupported .npy files: exit code 2 and one line naming the problem") {
  REQUIRE_NUMPY();
  TempDir dir("mxablate_quant_bad");
  numpy("x = np.ones((32, 64), np.float32)\n"
        "np.save('" + dir / "fortran.npy" + "', np.asfortranarray(x))\n"
        "np.save('" + dir / "three_d.npy" + "', x.reshape(2, 16, 64))\n"
        "np.save('" + dir / "int32.npy" + "', x.astype(np.int32))\n"
        "np.save('" + dir / "float64.npy" + "', x.astype(np.float64))\n"
        "np.save('" + dir / "big_endian.npy" + "', x.astype('>f4'))\n"
        "np.save('" + dir / "odd_cols.npy" + "', np.ones((32, 40), np.float32))\n"
        "np.save('" + dir / "good.npy" + "', x)");
  {
    std::ifstream good(dir / "good.npy", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(good)), std::istreambuf_iterator<char>());
    write_bytes(dir / "truncated.npy", bytes.substr(0, bytes.size() - 100));
    write_bytes(dir / "bad_magic.npy", "\x89PNG\r\n" + bytes.substr(6));
    write_bytes(dir / "header_cut.npy", bytes.substr(0, 30));
    write_bytes(dir / "empty.npy", "");
  }
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"fortran.npy", "Fortran-order arrays are not supported"},
      {"three_d.npy", "expected a 2-D array, got 3-D shape (2, 16, 64)"},
      {"int32.npy", "dtype '<i4' is not supported"},
      {"float64.npy", "dtype '<f8' is not supported"},
      {"big_endian.npy", "dtype '>f4' is not supported"},
      {"odd_cols.npy", "the number of columns (40) is not a multiple of the mxfp4 block size 32"},
      {"truncated.npy", "truncated data: expected 8192 bytes"},
      {"bad_magic.npy", "not a .npy file (bad magic string)"},
      {"header_cut.npy", "truncated .npy header"},
      {"empty.npy", "not a .npy file (bad magic string)"},
      {"missing.npy", "cannot open the file"},
  };
  for (const auto& [file, message] : cases) {
    const auto r = run_command(kBin + " quant --in " + dir / file + " --out " + dir / "q.npy");
    INFO(file << ": " << r.output);
    CHECK(r.exit_code == 2);
    CHECK(r.output.find(message) != std::string::npos);
    CHECK(r.output.find(dir / file) != std::string::npos);
    CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
  }
  // Bad option values are input errors too.
  for (const std::string args : {"--format fp4", "--hadamard-size 24 --hadamard deterministic",
                                 "--axis diagonal", "--format bf16 --codes c.npy"}) {
    const auto r = run_command(kBin + " quant --in " + dir / "good.npy" + " --out " +
                               dir / "q.npy " + args);
    INFO(args << ": " << r.output);
    CHECK(r.exit_code == 2);
    CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
  }
}

TEST_CASE("mxablate quant --blocks 2d: rows and cols give the same values, the setting is printed back") {
  REQUIRE_NUMPY();
  TempDir dir("mxablate_quant_2d");
  numpy("rng = np.random.default_rng(2)\n"
        "x = rng.standard_normal((64, 96)).astype(np.float32)\n"
        "x[:, 5] *= 40\n"
        "np.save('" + dir / "x.npy" + "', x)\n"
        "np.save('" + dir / "x40.npy" + "', np.ones((40, 64), np.float32))");
  std::vector<std::vector<float>> values;
  for (const std::string axis : {"rows", "cols"}) {
    const auto r = run_command(kBin + " quant --in " + dir / "x.npy" + " --out " + dir / ("q_" + axis + ".npy") +
                               " --scales " + dir / ("s_" + axis + ".npy") + " --axis " + axis +
                               " --blocks 2d --rounding stochastic --seed 3 --json");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK(nlohmann::json::parse(r.output)["blocks"] == "2d");
    values.push_back(npy::read_matrix(dir / ("q_" + axis + ".npy")).data);
  }
  REQUIRE(values[0].size() == values[1].size());
  CHECK(std::memcmp(values[0].data(), values[1].data(), values[0].size() * 4) == 0);
  // The scale files, in the tensor's orientation: each tile's scale repeated over its 32 lines,
  // the same tile scales on both axes.
  numpy("a = np.load('" + dir / "s_rows.npy" + "')\n"
        "b = np.load('" + dir / "s_cols.npy" + "')\n"
        "assert a.shape == (64, 3) and b.shape == (2, 96), (a.shape, b.shape)\n"
        "assert (np.repeat(a, 32, axis=1) == np.repeat(b, 32, axis=0)).all()\n"
        "assert (a[:32] == a[0]).all() and (a[32:] == a[32]).all()");

  // The text report names the block shape.
  const auto text = run_command(kBin + " quant --in " + dir / "x.npy" + " --out " + dir / "q.npy" + " --blocks 2d");
  INFO(text.output);
  CHECK(text.exit_code == 0);
  CHECK(text.output.find("-> mxfp4 along rows in 2d blocks (scale rule floor, nearest rounding, Hadamard none)") != std::string::npos);

  // Bad values and shapes: exit code 2, one line.
  const std::vector<std::pair<std::string, std::string>> bad{
      {"x.npy --blocks 3d", "--blocks: '3d' is not one of: 1d, 2d"},
      {"x40.npy --blocks 2d --axis cols",
       "the number of rows (40) is not a multiple of the mxfp4 2-D block size 32 (2-D blocks tile both dimensions)"},
      {"x.npy --blocks 2d --scale-rule mse", "the mse scale rule is not available with 2-D blocks"},
      // Every list of accepted names is the kernels' name table's.
      {"x.npy --format fp5", "--format: 'fp5' is not one of: fp32, bf16, fp8-e4m3, fp8-e5m2, mxfp4, nvfp4"},
      {"x.npy --axis diag", "--axis: 'diag' is not one of: rows, cols"},
      {"x.npy --gemm bprop", "--gemm: 'bprop' is not one of: fprop, dgrad, wgrad"},
      {"x.npy --scale-rule round", "--scale-rule: 'round' is not one of: floor, ceil, even, mse"}};
  for (const auto& [args, message] : bad) {
    const auto r = run_command(kBin + " quant --out " + dir / "q.npy" + " --in " + dir / args);
    INFO(args << ": " << r.output);
    CHECK(r.exit_code == 2);
    CHECK(r.output.find(message) != std::string::npos);
    CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
  }
}
