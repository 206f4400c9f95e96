#include "mxablate/trainer/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <ATen/ATen.h>
#include <torch/serialize.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "mxablate/trainer/torch/error_line.h"
#include "mxablate/trainer/checkpoint/host_buffers.h"
#include "mxablate/trainer/torch/libtorch_compat.h"
#include "mxablate/data/sha256.h"

namespace mxablate::trainer {
namespace {

namespace fs = std::filesystem;

constexpr const char* kPrefix = "step-";
constexpr std::uintmax_t kMaxStateBytes = 16u << 20;  // state.json is a few KiB

fs::path checkpoints_dir(const std::string& run_dir) { return fs::path(run_dir) / "checkpoints"; }

// Data and directory entries must be on disk before the rename publishes them.
void fsync_path(const fs::path& p, bool directory) {
  const int fd = ::open(p.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) throw std::runtime_error(p.string() + ": cannot open for fsync");
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) throw std::runtime_error(p.string() + ": fsync failed");
}

// The step a directory name "step-XXXXXXXX" says, if it is one.
std::optional<int64_t> step_of_name(const std::string& name) {
  if (name.rfind(kPrefix, 0) != 0) return std::nullopt;
  const std::string digits = name.substr(std::string(kPrefix).size());
  if (digits.empty() || digits.size() > 18 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  return std::stoll(digits);
}

// Step directories by step number, ascending; only complete ones (final name, state.json).
std::vector<std::pair<int64_t, fs::path>> complete_checkpoints(const std::string& run_dir) {
  std::vector<std::pair<int64_t, fs::path>> found;
  const fs::path dir = checkpoints_dir(run_dir);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return found;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const auto step = step_of_name(entry.path().filename().string());
    if (!step || !entry.is_directory(ec)) continue;
    if (!fs::exists(entry.path() / kCheckpointStateFile, ec)) continue;
    found.emplace_back(*step, entry.path());
  }
  std::sort(found.begin(), found.end());
  return found;
}

CheckpointFile describe_file(const fs::path& dir, const std::string& name) {
  return {name, static_cast<int64_t>(fs::file_size(dir / name)), data::sha256_file((dir / name).string())};
}

// Every parameter and buffer of `module` (recursively, as Module::save writes them) must be in
// the archive with the same shape and dtype: Module::load would otherwise replace a tensor with
// one of another shape, and the run would fail steps later inside a matmul.
// A working copy whose master the engine keeps apart is float32 in model.pt (the master).
// `engine` says which parameters those are.
void verify_module(const torch::nn::Module& module, torch::serialize::InputArchive& archive,
                   const std::string& prefix, const CheckpointedOptimizer& engine) {
  const auto check = [&](const std::string& key, const at::Tensor& expected, bool master) {
    at::Tensor saved;
    if (!archive.try_read(key, saved))
      throw CheckpointRejected("model.pt: " + prefix + key + " is missing");
    const caffe2::TypeMeta dtype = master ? caffe2::TypeMeta::Make<float>() : expected.dtype();
    if (saved.sizes() != expected.sizes() || saved.dtype() != dtype) {
      std::ostringstream want;
      want << expected.sizes() << " " << dtype;
      throw CheckpointRejected("model.pt: " + prefix + key + " is " + tensor_shape_text(saved) +
                               ", the model's is " + want.str());
    }
  };
  for (const auto& p : module.named_parameters(/*recurse=*/false)) check(p.key(), p.value(), engine.keeps_master(p.value()));
  for (const auto& b : module.named_buffers(/*recurse=*/false)) check(b.key(), b.value(), false);
  for (const auto& child : module.named_children()) {
    if (!child.value()->is_serializable()) continue;
    torch::serialize::InputArchive child_archive;
    if (!archive.try_read(child.key(), child_archive))
      throw CheckpointRejected("model.pt: " + prefix + child.key() + " is missing");
    verify_module(*child.value(), child_archive, prefix + child.key() + ".", engine);
  }
}

// Copies every parameter and buffer from the archive into the module's own tensors (verified by
// verify_module first). Module::load would re-point them at the loaded tensors instead, which
// would cut the parameters out of a sharded step's flat buffer. A working copy takes its master
// rounded, and the master's float32 values are collected in `masters` for the engine.
void load_module_in_place(torch::nn::Module& module, torch::serialize::InputArchive& archive,
                          const CheckpointedOptimizer& engine,
                          std::unordered_map<const c10::TensorImpl*, at::Tensor>& masters) {
  torch::NoGradGuard no_grad;
  const auto copy = [&](const std::string& key, at::Tensor target) {
    at::Tensor saved;
    archive.read(key, saved);
    target.copy_(saved);
    return saved;
  };
  for (const auto& p : module.named_parameters(/*recurse=*/false)) {
    const at::Tensor saved = copy(p.key(), p.value());
    if (engine.keeps_master(p.value())) masters[p.value().unsafeGetTensorImpl()] = saved;
  }
  for (const auto& b : module.named_buffers(/*recurse=*/false)) copy(b.key(), b.value());
  for (const auto& child : module.named_children()) {
    if (!child.value()->is_serializable()) continue;
    torch::serialize::InputArchive child_archive;
    archive.read(child.key(), child_archive);
    load_module_in_place(*child.value(), child_archive, engine, masters);
  }
}

std::string read_state_text(const fs::path& file) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) throw CheckpointRejected(std::string(kCheckpointStateFile) + ": missing");
  if (fs::file_size(file, ec) > kMaxStateBytes)
    throw CheckpointRejected(std::string(kCheckpointStateFile) + ": larger than a checkpoint state can be");
  std::ifstream in(file, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) throw CheckpointRejected(std::string(kCheckpointStateFile) + ": cannot be read");
  return text.str();
}

void verify_file(const fs::path& dir, const CheckpointFile& f) {
  const fs::path p = dir / f.name;
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) throw CheckpointRejected(f.name + ": missing");
  const auto bytes = static_cast<int64_t>(fs::file_size(p, ec));
  if (ec || bytes != f.bytes)
    throw CheckpointRejected(f.name + ": " + std::to_string(bytes) + " bytes, state.json records " +
                             std::to_string(f.bytes) + " (truncated or replaced)");
  std::string digest;
  try {
    digest = data::sha256_file(p.string());
  } catch (const std::exception& e) {
    throw CheckpointRejected(f.name + ": " + error_line(e));
  }
  if (digest != f.sha256)
    throw CheckpointRejected(f.name + ": checksum does not match state.json (the file is damaged)");
}

// Module::save's archive (parameters, then buffers, then each serializable child as a nested
// archive, in registration order) of host copies of the module's tensors: the same keys, order
// and flags, so load_checkpoint and verify_module read it as they read Module::save's.
void save_module_copy(const torch::nn::Module& module, torch::serialize::OutputArchive& archive, HostBuffers& host,
                      const std::unordered_map<const c10::TensorImpl*, at::Tensor>& masters) {
  for (const auto& p : module.named_parameters(/*recurse=*/false)) {
    const auto master = masters.find(p.value().unsafeGetTensorImpl());
    archive.write(p.key(), master != masters.end() ? master->second : host.copy_of(p.value()));
  }
  for (const auto& b : module.named_buffers(/*recurse=*/false))
    archive.write(b.key(), host.copy_of(b.value()), /*is_buffer=*/true);
  for (const auto& child : module.named_children()) {
    if (!child.value()->is_serializable()) continue;
    torch::serialize::OutputArchive child_archive(archive.compilation_unit());
    save_module_copy(*child.value(), child_archive, host, masters);
    archive.write(child.key(), child_archive);
  }
}

}  // namespace

CheckpointFile describe_checkpoint_file(const fs::path& dir, const std::string& name) {
  fsync_path(dir / name, false);
  return describe_file(dir, name);
}

std::string tensor_shape_text(const at::Tensor& t) {
  std::ostringstream os;
  os << t.sizes() << " " << t.dtype();
  return os.str();
}

CheckpointSnapshot::CheckpointSnapshot() = default;
CheckpointSnapshot::~CheckpointSnapshot() = default;
CheckpointSnapshot::CheckpointSnapshot(CheckpointSnapshot&&) noexcept = default;
CheckpointSnapshot& CheckpointSnapshot::operator=(CheckpointSnapshot&&) noexcept = default;

CheckpointSnapshot snapshot_checkpoint(const std::string& run_dir, torch::nn::Module& model, CheckpointedOptimizer& engine,
                                       const TrainerState& state, const nlohmann::json& run_config, bool root,
                                       HostBuffers& host) {
  CheckpointSnapshot s;
  s.run_dir = run_dir;
  s.state = state;
  s.run_config = run_config;
  s.root = root;
  host.begin();
  // Every rank: the masters kept apart from the model are gathered (on root), model.pt's values
  // for their working copies.
  const std::unordered_map<const c10::TensorImpl*, at::Tensor> masters = engine.snapshot_masters(host, root);
  if (root) {
    s.model = std::make_unique<torch::serialize::OutputArchive>();
    save_module_copy(model, *s.model, host, masters);
    // Nothing in training draws from LibTorch's generator after initialization (SR and the data
    // order use their own counter-based streams), but restoring it keeps that true by design.
    s.rng = std::make_unique<torch::serialize::OutputArchive>();
    s.rng->write("cpu_generator", at::detail::getDefaultCPUGenerator().get_state());
  }
  s.optimizer = engine.snapshot_optimizer(state.step, host);
  host.end(model.parameters().front().device());
  return s;
}

std::string write_checkpoint(CheckpointSnapshot& s, const CheckpointWriteProbe& probe) {
  const auto reached = [&](CheckpointWriteStage stage) {
    if (probe) probe(stage);
  };
  char name[32];
  std::snprintf(name, sizeof name, "%s%08lld", kPrefix, static_cast<long long>(s.state.step));
  const fs::path final_dir = checkpoints_dir(s.run_dir) / name;
  const fs::path tmp = checkpoints_dir(s.run_dir) / (std::string(name) + ".tmp");
  if (!s.root) {
    // Another rank writes its optimizer shard, if it has one, into the directory rank 0 made.
    s.optimizer->write(tmp);
    reached(CheckpointWriteStage::kFilesWritten);
    return "";
  }
  fs::remove_all(tmp);
  fs::create_directories(tmp);

  std::vector<CheckpointFile> files;
  s.model->save_to((tmp / "model.pt").string());
  s.rng->save_to((tmp / "rng.pt").string());
  // Checksums of the files as they are on disk, so that what is verified at load is what was
  // written.
  for (const std::string& f : checkpoint_tensor_files()) files.push_back(describe_checkpoint_file(tmp, f));
  for (CheckpointFile& f : s.optimizer->write(tmp)) files.push_back(std::move(f));
  reached(CheckpointWriteStage::kFilesWritten);
  const std::string run_id = s.run_config.is_object() ? s.run_config.value("run_id", std::string()) : "";
  {
    std::ofstream out(tmp / kCheckpointStateFile, std::ios::trunc | std::ios::binary);
    out << checkpoint_state_text(s.state, files, run_id, trajectory_config(s.run_config));
    out.flush();
    if (!out) throw std::runtime_error((tmp / kCheckpointStateFile).string() + ": write failed");
  }
  fsync_path(tmp / kCheckpointStateFile, false);
  fsync_path(tmp, true);
  fs::remove_all(final_dir);  // a checkpoint of the same step from a lost timeline
  fs::rename(tmp, final_dir);
  fsync_path(checkpoints_dir(s.run_dir), true);
  reached(CheckpointWriteStage::kPublished);
  return final_dir.string();
}

std::string save_checkpoint(const std::string& run_dir, torch::nn::Module& model, CheckpointedOptimizer& engine,
                            const TrainerState& state, const nlohmann::json& run_config, bool root) {
  HostBuffers host;
  CheckpointSnapshot s = snapshot_checkpoint(run_dir, model, engine, state, run_config, root, host);
  return write_checkpoint(s);
}

std::vector<std::string> checkpoints_newest_first(const std::string& run_dir) {
  std::vector<std::string> paths;
  const auto found = complete_checkpoints(run_dir);
  for (auto it = found.rbegin(); it != found.rend(); ++it) paths.push_back(it->second.string());
  return paths;
}

TrainerState load_checkpoint(const std::string& path, torch::nn::Module& model, CheckpointedOptimizer& engine,
                             const CheckpointExpectation& expect, bool verify_files) {
  const fs::path dir(path);
  CheckpointExpectation e = expect;
  e.step_in_name = step_of_name(dir.filename().string());
  const CheckpointState cs = parse_checkpoint_state(read_state_text(dir / kCheckpointStateFile), e);
  if (verify_files)
    for (const CheckpointFile& f : cs.files) verify_file(dir, f);

  // The files are the ones written at save time; now what they hold must fit this model and
  // optimizer. Everything is read and checked before anything is changed.
  const at::Device device = model.parameters().front().device();
  torch::serialize::InputArchive model_archive;
  at::Tensor generator_state;
  const char* reading = "model.pt";
  try {
    model_archive.load_from((dir / "model.pt").string(), device);
    verify_module(model, model_archive, "", engine);
    reading = "rng.pt";
    torch::serialize::InputArchive rng_archive;
    rng_archive.load_from((dir / "rng.pt").string());
    const at::Tensor current = at::detail::getDefaultCPUGenerator().get_state();
    if (!rng_archive.try_read("cpu_generator", generator_state))
      throw CheckpointRejected("rng.pt: cpu_generator is missing");
    if (generator_state.dtype() != current.dtype() || generator_state.sizes() != current.sizes())
      throw CheckpointRejected("rng.pt: cpu_generator is " + tensor_shape_text(generator_state) +
                               ", expected " + tensor_shape_text(current));
  } catch (const CheckpointRejected&) {
    throw;
  } catch (const std::exception& err) {
    throw CheckpointRejected(std::string(reading) + ": " + error_line(err));
  }
  // The optimizer reads and checks its files, then takes their state (or throws, unchanged).
  engine.load_optimizer(dir, cs.files, cs.state.step);

  std::unordered_map<const c10::TensorImpl*, at::Tensor> masters;
  load_module_in_place(model, model_archive, engine, masters);
  engine.load_masters(masters);
  at::Generator generator = at::detail::getDefaultCPUGenerator();  // a handle to the default
  generator.set_state(generator_state);
  return cs.state;
}

std::string set_aside_checkpoint(const std::string& path) {
  const fs::path target = path + ".rejected";
  std::error_code ec;
  fs::remove_all(target, ec);
  fs::rename(path, target, ec);
  return ec ? std::string() : target.string();
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
