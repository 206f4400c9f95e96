#include "mxablate/trainer/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <ATen/ATen.h>
#include <torch/serialize.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <vector>

#include "mxablate/contract/run_config.h"

namespace mxablate::trainer {
namespace {

namespace fs = std::filesystem;

constexpr int kCheckpointVersion = 1;
constexpr const char* kPrefix = "step-";

fs::path checkpoints_dir(const std::string& run_dir) { return fs::path(run_dir) / "checkpoints"; }

// Data and directory entries must be on disk before the rename publishes them.
void fsync_path(const fs::path& p, bool directory) {
  const int fd = ::open(p.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) throw std::runtime_error(p.string() + ": cannot open for fsync");
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) throw std::runtime_error(p.string() + ": fsync failed");
}

// Step directories by step number, ascending; only complete ones (final name, state.json).
std::vector<std::pair<int64_t, fs::path>> complete_checkpoints(const std::string& run_dir) {
  std::vector<std::pair<int64_t, fs::path>> found;
  const fs::path dir = checkpoints_dir(run_dir);
  if (!fs::is_directory(dir)) return found;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || name.rfind(kPrefix, 0) != 0) continue;
    const std::string digits = name.substr(std::string(kPrefix).size());
    if (digits.empty() || !std::all_of(digits.begin(), digits.end(), ::isdigit)) continue;
    if (!fs::exists(entry.path() / "state.json")) continue;
    found.emplace_back(std::stoll(digits), entry.path());
  }
  std::sort(found.begin(), found.end());
  return found;
}

}  // namespace

nlohmann::json trajectory_config(const nlohmann::json& c) {
  nlohmann::json t = nlohmann::json::object();
  for (const char* key : {"model", "data", "train", "precision", "quant"})
    if (c.contains(key)) t[key] = c.at(key);
  return t;
}

std::string save_checkpoint(const std::string& run_dir, torch::nn::Module& model,
                            torch::optim::Optimizer& optimizer, const TrainerState& state,
                            const nlohmann::json& run_config) {
  char name[32];
  std::snprintf(name, sizeof name, "%s%08lld", kPrefix, static_cast<long long>(state.step));
  const fs::path final_dir = checkpoints_dir(run_dir) / name;
  const fs::path tmp = checkpoints_dir(run_dir) / (std::string(name) + ".tmp");
  fs::remove_all(tmp);
  fs::create_directories(tmp);

  {
    torch::serialize::OutputArchive archive;
    model.save(archive);
    archive.save_to((tmp / "model.pt").string());
  }
  {
    torch::serialize::OutputArchive archive;
    optimizer.save(archive);
    archive.save_to((tmp / "optimizer.pt").string());
  }
  {
    // Nothing in training draws from LibTorch's generator after initialization (SR and the data
    // order use their own counter-based streams), but restoring it keeps that true by design.
    torch::serialize::OutputArchive archive;
    archive.write("cpu_generator", at::detail::getDefaultCPUGenerator().get_state());
    archive.save_to((tmp / "rng.pt").string());
  }
  const nlohmann::json state_json = {
      {"version", kCheckpointVersion},
      {"step", state.step},
      {"tokens", state.tokens},
      {"samples", state.samples},
      {"target_reached", state.target_reached},
      {"divergence", state.divergence},
      {"events_seq", state.events_seq},
      {"trajectory_config", trajectory_config(run_config)},
  };
  {
    std::ofstream out(tmp / "state.json", std::ios::trunc);
    out << state_json.dump(2) << "\n";
    if (!out) throw std::runtime_error((tmp / "state.json").string() + ": write failed");
  }
  for (const char* f : {"model.pt", "optimizer.pt", "rng.pt", "state.json"}) fsync_path(tmp / f, false);
  fsync_path(tmp, true);
  fs::remove_all(final_dir);  // a checkpoint of the same step from a lost timeline
  fs::rename(tmp, final_dir);
  fsync_path(checkpoints_dir(run_dir), true);
  return final_dir.string();
}

std::optional<std::string> latest_checkpoint(const std::string& run_dir) {
  const auto found = complete_checkpoints(run_dir);
  if (found.empty()) return std::nullopt;
  return found.back().second.string();
}

TrainerState load_checkpoint(const std::string& path, torch::nn::Module& model,
                             torch::optim::Optimizer& optimizer, const nlohmann::json& run_config) {
  const fs::path dir(path);
  nlohmann::json j;
  {
    std::ifstream in(dir / "state.json");
    if (!in) throw std::runtime_error((dir / "state.json").string() + ": cannot open");
    try {
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::parse_error& e) {
      throw std::runtime_error((dir / "state.json").string() + ": not valid JSON: " + e.what());
    }
  }
  if (j.value("version", 0) != kCheckpointVersion)
    throw std::runtime_error(path + ": checkpoint version " + j.value("version", nlohmann::json(0)).dump() +
                             " is not supported");
  const nlohmann::json saved = j.at("trajectory_config");
  const nlohmann::json now = trajectory_config(run_config);
  if (saved != now) {
    const nlohmann::json diff = nlohmann::json::diff(saved, now);
    const std::string where = diff.empty() ? "?" : diff[0].value("path", std::string("?"));
    throw contract::ConfigError(path + ": written under a different run config (first difference at " +
                                where + "); resume needs the same model, data, train, precision and quant");
  }
  // Tensors are read straight onto the model's device (a checkpoint written on one device
  // resumes on the same one; the orchestrator does not move runs between devices).
  const at::Device device = model.parameters().front().device();
  {
    torch::serialize::InputArchive archive;
    archive.load_from((dir / "model.pt").string(), device);
    model.load(archive);
  }
  {
    torch::serialize::InputArchive archive;
    archive.load_from((dir / "optimizer.pt").string(), device);
    optimizer.load(archive);
  }
  {
    torch::serialize::InputArchive archive;
    archive.load_from((dir / "rng.pt").string());
    at::Tensor state;
    archive.read("cpu_generator", state);
    at::Generator generator = at::detail::getDefaultCPUGenerator();  // a handle to the default
    generator.set_state(state);
  }
  TrainerState s;
  s.step = j.at("step").get<int64_t>();
  s.tokens = j.at("tokens").get<int64_t>();
  s.samples = j.at("samples").get<int64_t>();
  s.target_reached = j.at("target_reached").get<bool>();
  s.divergence = j.at("divergence");
  s.events_seq = j.at("events_seq").get<int64_t>();
  return s;
}

void prune_checkpoints(const std::string& run_dir, int keep) {
  const auto found = complete_checkpoints(run_dir);
  for (size_t i = 0; i + static_cast<size_t>(keep) < found.size(); ++i) fs::remove_all(found[i].second);
  const fs::path dir = checkpoints_dir(run_dir);
  if (!fs::is_directory(dir)) return;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0) fs::remove_all(entry.path());
  }
}

}  // namespace mxablate::trainer
