// Sets QuantSession::collect_telemetry for a scope and restores it after, also when the scope
// throws: the passes that run a forward twice (a checkpointed block, the chunked loss;
// docs/design.md §4) record a quantization's telemetry in one of the two only.
#pragma once

#include "mxablate/trainer/mx_linear.h"

namespace mxablate::trainer {

class TelemetrySetting {
 public:
  TelemetrySetting(QuantSession& session, bool collect)
      : session_(session), before_(session.collect_telemetry) {
    session_.collect_telemetry = collect;
  }
  ~TelemetrySetting() { session_.collect_telemetry = before_; }
  TelemetrySetting(const TelemetrySetting&) = delete;
  TelemetrySetting& operator=(const TelemetrySetting&) = delete;

 private:
  QuantSession& session_;
  bool before_;
};

}  // namespace mxablate::trainer
