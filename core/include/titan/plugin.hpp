// The plugin contract: each plugin library exports one C function returning
// a PluginDescriptor. The host checks abi_version and torch_version before
// it calls anything else, then lets the plugin register its factories.
//
// ABI rule (full text: docs/plugins.md): bump kPluginAbiVersion with any change
// that breaks an already-built plugin: interface virtuals, members of structs
// crossing the boundary, the descriptor after abi_version, or a call's meaning.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "titan/config.hpp"

namespace titan {

// 2: CausalLM init/forward/layout hooks; 3: sharded TrainState, HF hooks;
// 4: core layers and seams (layers.hpp), loss slot, Stage::loss_parallel, Parallelizer::validate, tp_plan by module path,
//    block bodies and wrapper inners callable after forward (kept for recompute)
// 5: Comm::send_async / recv_async (tagged point-to-point), CausalLM::set_positions (token positions of a sequence piece);
//    PipelineSchedule (pipeline_schedule.hpp), kind_pipeline_schedule, PluginRegistrar::pipeline_schedule (named, several per plugin)
// 6: PipelineSplitter (pipeline.hpp: a Parallelizer of Stage::pipeline_split the trainer cuts stages by);
//    TensorLayout::replication / is_first_copy never count pp
// 7: CollectiveEvent::peer / tag (send/recv: the other end as a global rank, the message tag)
constexpr int kPluginAbiVersion = 7;

enum PluginKind : uint32_t {
  kind_model = 1u << 0,
  kind_parallelizer = 1u << 1,
  kind_schedule = 1u << 2,
  kind_optimizer = 1u << 3,
  kind_lr_schedule = 1u << 4,
  kind_precision = 1u << 5,
  kind_checkpointer = 1u << 6,
  kind_comm_observer = 1u << 7,
  kind_metrics_sink = 1u << 8,
  kind_pipeline_schedule = 1u << 9,
};
std::string kinds_to_string(uint32_t kinds);

class ModelSpec;
class Parallelizer;
class Schedule;
class OptimizerFactory;
class LrSchedule;
class PrecisionPolicy;
class Checkpointer;
class CommObserver;
class MetricsSink;
class PipelineSchedule;

// What a factory gets: its options (read them all, with defaults, so that
// unknown keys are caught and `plugins inspect` can list them) and the job.
struct PluginContext {
  ConfigNode options;
  std::string dump_folder;
  int rank = 0;
  int world_size = 1;
  int64_t training_steps = 0;  // training.steps, for schedules
};

template <class T>
using Factory = std::function<std::unique_ptr<T>(const PluginContext&)>;

// The host's side of registration; a plugin fills the kinds it declared.
class PluginRegistrar {
 public:
  virtual ~PluginRegistrar() = default;
  virtual void model(Factory<ModelSpec> factory) = 0;
  virtual void parallelizer(Factory<Parallelizer> factory) = 0;
  virtual void schedule(Factory<Schedule> factory) = 0;
  virtual void optimizer(Factory<OptimizerFactory> factory) = 0;
  virtual void lr_schedule(Factory<LrSchedule> factory) = 0;
  virtual void precision(Factory<PrecisionPolicy> factory) = 0;
  virtual void checkpointer(Factory<Checkpointer> factory) = 0;
  virtual void comm_observer(Factory<CommObserver> factory) = 0;
  virtual void metrics_sink(Factory<MetricsSink> factory) = 0;
  // One call per schedule (a plugin may register several); `name` as users write it in
  // pipeline_parallel_schedule (matched case-insensitively), equal to the object's name().
  virtual void pipeline_schedule(const std::string& name, Factory<PipelineSchedule> factory) = 0;
};

struct PluginDescriptor {
  int abi_version;            // must stay the first field
  const char* name;
  const char* version;
  const char* torch_version;  // LibTorch the plugin was compiled against
  uint32_t kinds;             // PluginKind bits
  const char* summary;
  void (*register_factories)(PluginRegistrar& registrar);
};

}  // namespace titan

#define TITAN_PLUGIN_ENTRY titan_plugin_descriptor
#define TITAN_PLUGIN_ENTRY_NAME "titan_plugin_descriptor"

// Defines the plugin's one exported symbol. Use once per plugin library.
#define TITAN_PLUGIN(NAME, VERSION, KINDS, SUMMARY, REGISTER_FN)                      \
  extern "C" __attribute__((visibility("default"))) const ::titan::PluginDescriptor* \
  TITAN_PLUGIN_ENTRY() {                                                               \
    static const ::titan::PluginDescriptor descriptor{                                 \
        ::titan::kPluginAbiVersion, NAME, VERSION, ::titan::torch_version_string(),    \
        static_cast<uint32_t>(KINDS), SUMMARY, REGISTER_FN};                           \
    return &descriptor;                                                                \
  }

#include "titan/compat.hpp"
