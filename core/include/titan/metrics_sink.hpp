// MetricsSink: receives the metrics of each logged step.
#pragma once
#include <cstdint>
#include <map>
#include <string>

namespace titan {

class MetricsSink {
 public:
  virtual ~MetricsSink() = default;
  virtual void write(int64_t step, const std::map<std::string, double>& metrics) = 0;
  virtual void flush() {}
};

}  // namespace titan
