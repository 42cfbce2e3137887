// The `tensorboard` plugin: the sink behind `metrics.enable_tensorboard`.
// Rank 0 writes each logged step as scalars under TorchTitan's tag names to
// <dump_folder>/<metrics.save_tb_folder>/events.out.tfevents.*.
#include <filesystem>
#include <map>
#include <memory>

#include "event_file.h"
#include "titan/metrics_sink.hpp"
#include "titan/plugin.hpp"

namespace {

using titan::tensorboard::EventFileWriter;

// Titan's metric key -> TorchTitan's TensorBoard tag and the factor to its
// unit, so that charts line up with TorchTitan runs. Other keys keep their
// name.
struct TagMapping {
  const char* tag;
  double scale;
};
const std::map<std::string, TagMapping>& torchtitan_tags() {
  static const std::map<std::string, TagMapping> tags{
      {"loss", {"loss_metrics/global_avg_loss", 1.0}},
      {"grad_norm", {"grad_norm", 1.0}},
      {"lr", {"lr", 1.0}},
      {"tokens_per_sec", {"throughput(tps)", 1.0}},
      {"mfu", {"mfu(%)", 100.0}},
      {"memory_bytes", {"memory/peak(GiB)", 1.0 / double(1ull << 30)}},
  };
  return tags;
}

class TensorBoardSink : public titan::MetricsSink {
 public:
  explicit TensorBoardSink(std::unique_ptr<EventFileWriter> writer) : writer_(std::move(writer)) {}

  void write(int64_t step, const std::map<std::string, double>& metrics) override {
    if (!writer_) return;  // not rank 0
    std::vector<std::pair<std::string, float>> scalars;
    for (const auto& [key, value] : metrics) {
      auto mapped = torchtitan_tags().find(key);
      // Non-finite values are written: TensorBoard shows a NaN loss, and a
      // gap in the chart would hide the step that went wrong.
      if (mapped == torchtitan_tags().end()) {
        scalars.emplace_back(key, static_cast<float>(value));
      } else {
        scalars.emplace_back(mapped->second.tag, static_cast<float>(value * mapped->second.scale));
      }
    }
    writer_->append(step, scalars);
  }

  void flush() override {
    if (writer_) writer_->flush();
  }

 private:
  std::unique_ptr<EventFileWriter> writer_;
};

// The event file this rank writes: only rank 0 writes, as TorchTitan does
// by default (one event file per job); elsewhere none.
std::unique_ptr<EventFileWriter> open_writer(const titan::PluginContext& context) {
  // The metrics: section is this plugin's options (core's switch enable_tensorboard).
  std::string folder = context.options.get<std::string>("save_tb_folder", "tb", "TensorBoard folder under dump_folder");
  if (folder.empty()) context.options.fail("save_tb_folder", "expected a folder name, got an empty string");
  if (context.rank != 0) return nullptr;
  return std::make_unique<EventFileWriter>((std::filesystem::path(context.dump_folder) / folder).string());
}

}  // namespace

TITAN_PLUGIN_OF(metrics_sink, TensorBoardSink, "1.0",
                "TensorBoard event files of each logged step's metrics (metrics.enable_tensorboard)", open_writer)
