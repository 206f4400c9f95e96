#include "mxablate/trainer/checkpoint/checkpoint_writer.h"

#include <chrono>
#include <memory>
#include <stdexcept>
#include <utility>

#include "mxablate/trainer/rules/process_stats.h"

namespace mxablate::trainer {

CheckpointWriter::~CheckpointWriter() {
  if (!pending_) return;
  try {
    pending_->result.wait();
  } catch (...) {
  }
}

void CheckpointWriter::start(Progress at, std::function<std::string()> write) {
  if (pending_) throw std::logic_error("checkpoint writer: a write is still in flight");
  auto seconds = std::make_shared<double>(0.0);
  auto timed = [write = std::move(write), seconds]() {
    const auto begin = std::chrono::steady_clock::now();
    struct Clock {  // timed however the write ends
      std::chrono::steady_clock::time_point begin;
      double* into;
      ~Clock() { *into = seconds_between(begin, std::chrono::steady_clock::now()); }
    } clock{begin, seconds.get()};
    return write();
  };
  if (background_) {
    pending_ = Pending{at, std::async(std::launch::async, std::move(timed)), seconds};
    return;
  }
  std::promise<std::string> done;
  try {
    done.set_value(timed());
  } catch (...) {
    done.set_exception(std::current_exception());
  }
  pending_ = Pending{at, done.get_future(), seconds};
}

std::optional<CheckpointWriter::Written> CheckpointWriter::collect(bool wait) {
  if (!pending_) return std::nullopt;
  if (!wait && pending_->result.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return std::nullopt;
  Pending finished = std::move(*pending_);
  pending_.reset();
  finished.result.wait();
  write_seconds_ += *finished.seconds;
  std::string path = finished.result.get();  // rethrows the write's error
  return Written{finished.at, std::move(path), *finished.seconds};
}

}  // namespace mxablate::trainer
