// A deliberately wrong metrics sink: it throws on a non-finite value, which
// would end a run on the step where training.on_nonfinite_loss=skip was
// meant to carry on; titan-conformance's metrics_sink.accepts_steps must
// fail it.
#include <cmath>
#include <stdexcept>

#include "titan/metrics_sink.hpp"
#include "test_plugin.hpp"

namespace {

class NanIntolerantSink : public titan::MetricsSink {
 public:
  void write(int64_t step, const std::map<std::string, double>& metrics) override {
    for (const auto& [key, value] : metrics) {
      if (!std::isfinite(value)) throw std::runtime_error(key + " is not finite at step " + std::to_string(step));
    }
  }
};

}  // namespace

TITAN_TEST_PLUGIN_OF(nan_intolerant_sink, metrics_sink, NanIntolerantSink, "1.0",
                "test plugin: a sink that throws on NaN")
