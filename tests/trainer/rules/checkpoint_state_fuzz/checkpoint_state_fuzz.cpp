// libFuzzer target for a checkpoint's state.json (trainer/rules checkpoint_state.h): any bytes must
// give either a verified state that is consistent with the run, or a CheckpointRejected of one
// line naming state.json — never a crash, another exception, a sanitizer report or a hang.
// Inputs that parse as a JSON object are also checked sealed again with a matching checksum, so
// that mutations reach the field and consistency checks behind the checksum.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "mxablate/trainer/rules/checkpoint_state.h"

using namespace mxablate::trainer;

namespace {

// The run the seed state belongs to (seeds/state.json, step 10).
const CheckpointExpectation& expectation() {
  static const CheckpointExpectation e = [] {
    CheckpointExpectation x;
    x.run_id = "fuzz-run";
    x.trajectory_config = {{"model", "smoke"}, {"train", {{"lr", 0.001}}}};
    x.total_steps = 100;
    x.tokens_per_step = 1024;
    x.samples_per_step = 16;
    return x;
  }();
  return e;
}

void check(const std::string& text) {
  try {
    const CheckpointState s = parse_checkpoint_state(text, expectation());
    const TrainerState& t = s.state;
    if (t.step < 0 || t.step > 100 || t.tokens != t.step * 1024 || t.samples != t.step * 16 ||
        t.events_seq < 0 ||
        s.files.size() != checkpoint_tensor_files().size() + static_cast<size_t>(s.optimizer_shards > 0 ? s.optimizer_shards : 1))
      std::abort();  // an accepted state must be one the run can be in
  } catch (const CheckpointRejected& e) {
    const std::string what = e.what();
    if (what.find('\n') != std::string::npos) std::abort();  // one line
    if (what.rfind("state.json: ", 0) != 0) std::abort();     // naming the file
    // In our words: the JSON library's text only where the input itself holds it (a message
    // quotes what the parser last read).
    if (what.find("json.exception") != std::string::npos &&
        text.find("json.exception") == std::string::npos)
      std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  check(text);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception&) {
    return 0;
  }
  if (!j.is_object()) return 0;
  seal_checkpoint_state(j);
  check(j.dump());
  return 0;
}
