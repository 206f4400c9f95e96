// One line for an exception's message. LibTorch's c10::Error carries a multi-line message and a
// stack trace in what(); a reason recorded in events.jsonl or printed as the trainer's last line
// must be one line that says what went wrong, not the last frame of a trace.
#pragma once

#include <c10/util/Exception.h>

#include <exception>
#include <string>

namespace mxablate::trainer {

inline std::string error_line(const std::exception& e) {
  const auto* torch_error = dynamic_cast<const c10::Error*>(&e);
  std::string m = torch_error ? torch_error->what_without_backtrace() : e.what();
  const size_t start = m.find_first_not_of(" \t\r\n");
  m = start == std::string::npos ? std::string() : m.substr(start);
  if (const size_t end = m.find_first_of("\r\n"); end != std::string::npos) m.resize(end);
  while (!m.empty() && (m.back() == ' ' || m.back() == '\t')) m.pop_back();
  return m.empty() ? std::string("unknown error") : m;
}

}  // namespace mxablate::trainer
