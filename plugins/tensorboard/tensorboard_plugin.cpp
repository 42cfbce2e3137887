// The `tensorboard` plugin: the sink behind `metrics.enable_tensorboard`.
// Rank 0 (or every rank, metrics.save_for_all_ranks) writes each logged
// step's scalars under their keys, TorchTitan's tag names, to
// <dump_folder>/<metrics.save_tb_folder>/events.out.tfevents.*.
#include <filesystem>
#include <map>
#include <string>
#include <memory>

#include "event_file.h"
#include "titan/metrics_sink.hpp"
#include "titan/plugin.hpp"

namespace {

using titan::tensorboard::EventFileWriter;

class TensorBoardSink : public titan::MetricsSink {
 public:
  explicit TensorBoardSink(std::unique_ptr<EventFileWriter> writer) : writer_(std::move(writer)) {}

  void write(int64_t step, const std::map<std::string, double>& metrics) override {
    if (!writer_) return;  // a rank that writes none
    // Titan's keys are TorchTitan's tags already. Non-finite values are
    // written: TensorBoard shows a NaN loss, and a gap in the chart would
    // hide the step that went wrong.
    std::vector<std::pair<std::string, float>> scalars;
    for (const auto& [key, value] : metrics) scalars.emplace_back(key, static_cast<float>(value));
    writer_->append(step, scalars);
  }

  void flush() override {
    if (writer_) writer_->flush();
  }

 private:
  std::unique_ptr<EventFileWriter> writer_;
};

// The event file this rank writes, as TorchTitan: rank 0's in
// <save_tb_folder>/ (one per job), or with metrics.save_for_all_ranks each
// rank's in <save_tb_folder>/rank_<r>/.
std::unique_ptr<EventFileWriter> open_writer(const titan::PluginContext& context) {
  // The metrics: section is this plugin's options (core's switch enable_tensorboard).
  std::string folder = context.options.get<std::string>("save_tb_folder", "tb", "TensorBoard folder under dump_folder");
  if (folder.empty()) context.options.fail("save_tb_folder", "expected a folder name, got an empty string");
  const bool all_ranks = context.options.get<bool>("save_for_all_ranks", false, "every rank writes its metrics");
  std::filesystem::path path = std::filesystem::path(context.dump_folder) / folder;
  if (all_ranks) return std::make_unique<EventFileWriter>((path / ("rank_" + std::to_string(context.rank))).string());
  if (context.rank != 0) return nullptr;
  return std::make_unique<EventFileWriter>(path.string());
}

}  // namespace

TITAN_PLUGIN_OF(metrics_sink, TensorBoardSink, "1.0",
                "TensorBoard event files of each logged step's metrics (metrics.enable_tensorboard)", open_writer)
