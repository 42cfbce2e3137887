// A working test plugin: a metrics sink that appends what it receives to a
// file, and a parallelizer that reports the apply order its options give;
// used by registry tests.
#include <fstream>

#include "titan/metrics_sink.hpp"
#include "titan/parallelizer.hpp"
#include "test_plugin.hpp"

namespace {

class EchoSink : public titan::MetricsSink {
 public:
  explicit EchoSink(std::string path) : path_(std::move(path)) {}
  void write(int64_t step, const std::map<std::string, double>& metrics) override {
    std::ofstream out(path_, std::ios::app);
    for (const auto& [key, value] : metrics) out << step << " " << key << " " << value << "\n";
  }

 private:
  std::string path_;
};

class EchoParallelizer : public titan::Parallelizer {
 public:
  explicit EchoParallelizer(titan::ApplyOrder order) : order_(order) {}
  titan::ApplyOrder apply_order() const override { return order_; }
  void parallelize(titan::CausalLM&, const titan::ParallelizeContext&) override {}

 private:
  titan::ApplyOrder order_;
};

void register_echo(titan::PluginRegistrar& registrar) {
  registrar.metrics_sink([](const titan::PluginContext& context) {
    return std::make_unique<EchoSink>(context.options.get<std::string>("path", "echo.txt", "output file"));
  });
  registrar.parallelizer([](const titan::PluginContext& context) {
    int order = context.options.get<int>("apply_order", 6, "place in the canonical apply order (ApplyOrder)");
    return std::make_unique<EchoParallelizer>(static_cast<titan::ApplyOrder>(order));
  });
}

}  // namespace

TITAN_TEST_PLUGIN(echo, "1.0", titan::kind_metrics_sink | titan::kind_parallelizer, "test plugin",
             register_echo)
