// Scoped settings of a QuantSession: a bool setting changed for a scope and restored after, also
// when the scope throws.
#pragma once

#include "mxablate/trainer/numerics/mx_linear.h"

namespace mxablate::trainer {

class SessionFlagSetting {
 public:
  SessionFlagSetting(QuantSession& session, bool QuantSession::*flag, bool value)
      : session_(session), flag_(flag), before_(session.*flag) {
    session_.*flag_ = value;
  }
  ~SessionFlagSetting() { session_.*flag_ = before_; }
  SessionFlagSetting(const SessionFlagSetting&) = delete;
  SessionFlagSetting& operator=(const SessionFlagSetting&) = delete;

 private:
  QuantSession& session_;
  bool QuantSession::*flag_;
  bool before_;
};

// collect_telemetry: the passes that run a forward twice (a checkpointed block, the chunked loss;
// docs/design.md §4) record a quantization's telemetry in one of the two only.
class TelemetrySetting : public SessionFlagSetting {
 public:
  TelemetrySetting(QuantSession& session, bool collect)
      : SessionFlagSetting(session, &QuantSession::collect_telemetry, collect) {}
};

}  // namespace mxablate::trainer
