#include "mxablate/contract/target_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "mxablate/contract/json_file.h"

namespace mxablate::contract {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

[[noreturn]] void fail(const fs::path& path, const std::string& what) {
  throw std::runtime_error(path.string() + ": " + what + ": " + std::strerror(errno));
}

// The whole text to `fd`, then fsync: the rename publishes a complete file.
void write_all(int fd, const std::string& text, const fs::path& path) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail(path, "cannot write");
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) fail(path, "cannot sync");
}

}  // namespace

void write_target_file(const fs::path& run_dir, const TargetFile& target) {
  if (!std::isfinite(target.val_loss) || !(target.val_loss > 0))
    throw std::invalid_argument("target.json: val_loss must be a finite number > 0");
  json j = {{"val_loss", target.val_loss}};
  if (!target.basis.empty()) j["basis"] = target.basis;
  // Replacement of invalid UTF-8 keeps the writer from throwing on odd arm names.
  const std::string text = j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  const fs::path final_path = run_dir / kTargetFileName;
  const fs::path tmp = run_dir / (std::string(kTargetFileName) + ".tmp");
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(tmp, "cannot create");
  try {
    write_all(fd, text, tmp);
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) fail(tmp, "cannot close");
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) fail(final_path, "cannot rename into place");
}

void remove_target_file(const fs::path& run_dir) {
  const fs::path path = run_dir / kTargetFileName;
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) fail(path, "cannot remove");
}

TargetFileRead read_target_file(const fs::path& run_dir) {
  const fs::path path = run_dir / kTargetFileName;
  const std::string name = path.string();
  TargetFileRead out;
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) return out;
  try {
    const json j = parse_json_file(name, kMaxTargetFileBytes);
    if (!j.is_object()) {
      out.problem = name + ": expected an object like {\"val_loss\": 3.3}, got " +
                    shown_json(j).substr(0, 40);
      return out;
    }
    TargetFile t;
    bool has_loss = false;
    for (const auto& [key, value] : j.items()) {
      if (key == "val_loss") {
        const std::string why = json_to(value, t.val_loss);
        if (!why.empty() || !(t.val_loss > 0)) {
          out.problem = name + ": val_loss: expected a finite number > 0, got " +
                        shown_json(value).substr(0, 40);
          return out;
        }
        has_loss = true;
      } else if (key == "basis") {
        const std::string why = json_to(value, t.basis);
        if (!why.empty()) {
          out.problem = name + ": basis: " + why;
          return out;
        }
      } else {
        out.problem = name + ": unknown key " + shown_json_key(key).substr(0, 40) +
                      "; expected val_loss and basis";
        return out;
      }
    }
    if (!has_loss) {
      out.problem = name + ": val_loss is missing";
      return out;
    }
    out.target = std::move(t);
  } catch (const std::exception& e) {
    // JsonFileError's one line (size, JSON syntax, not a regular file); anything else too.
    out.problem = e.what();
  }
  return out;
}

}  // namespace mxablate::contract
