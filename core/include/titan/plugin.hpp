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
#include <type_traits>

#include "titan/config.hpp"
#include "titan/plan_entry.hpp"

namespace titan {

// 2: CausalLM init/forward/layout hooks; 3: sharded TrainState, HF hooks;
// 4: core layers and seams (layers.hpp), loss slot, ApplyOrder::loss_parallel, Parallelizer::validate, tp_plan by module path,
//    block bodies and wrapper inners callable after forward (kept for recompute)
// 5: Comm::send_async / recv_async (tagged point-to-point), CausalLM::set_positions (token positions of a sequence piece);
//    PipelineSchedule (pipeline_schedule.hpp), kind_pipeline_schedule, PluginRegistrar::pipeline_schedule (named, several per plugin)
// 6: PipelineSplitter (pipeline.hpp: a Parallelizer of ApplyOrder::pipeline_split the trainer cuts stages by);
//    TensorLayout::replication / is_first_copy never count pp
// 7: CollectiveEvent::peer / tag (send/recv: the other end as a global rank, the message tag)
// 8: ModelSpec::pipeline_split_points removed (nothing called it); Stage -> ApplyOrder (apply_order.hpp),
//    Parallelizer::stage() -> apply_order(); ValidateContext::apply_orders; Parallelizer::allows_split_backward
// 9: PipelineSplitter is its own kind (kind_pipeline_splitter, PluginRegistrar::pipeline_splitter), no longer a
//    Parallelizer; ApplyOrder::pipeline_split removed; Parallelizer::mesh_splits (plugin-declared mesh dims);
//    Schedule::step -> Schedule::forward_backward
// 10: Comm::all_to_all_v (uneven per-rank rows, for expert parallelism's dispatch); DispatchedTokens::exchange;
//     DeviceMesh::splits and TensorLayout::replication / is_first_copy count split dims (ep, efsdp)
// 11: TpStyle::no_parallel; MoE::forward_rows, find_moe_layers (found through wrappers); swap_module swaps inside a
//     wrapper's inner layer too; the flattened mesh dim dp_shard_cp_tp (expert parallelism's span)
// 12: CollectiveEvent::send_rows / recv_rows (an uneven all-to-all's splits); MoEOptions::forced_experts;
//     DeviceMesh::group_names; CommConfig / DebugConfig fields; clip_grad_norm_on_device; balance_experts'
//     read_loads; CausalLM::last_position
// 13: CausalLM step hooks (StepHook, StepHookContext, add_step_hook, virtual step_hooks) and add_moe_step_hook
//     (MoE's load balancing and expert biases leave the trainer); TrainingConfig::cuda_graph is an enum (auto)
// 14: PluginRegistrar::plan_entry (a plugin writes its own entry of the configs titan plan writes)
// 15: block-causal attention: AttentionCore::forward and DecoderAttention::forward take the documents
//     (AttentionContext), CausalLM::run takes document positions, Microbatch::document_positions;
//     the loss over the global batch's real labels: Microbatch::row_weights, loss_weight, weighted_loss
// 16: libtitan_core exports the SDK only (the trainer and the planner are libtitan_train and libtitan_plan);
//     Schedule -> MicrobatchRunner (kind_microbatch_runner, titan/microbatch_runner.hpp), gradient_accumulation
//     takes an Autocast; titan/pipeline_program.hpp left the SDK (its config key names moved to
//     pipeline_schedule.hpp); DeviceMesh is built from ProcessGroups
// 17: generation's KV cache: KvCache, AttentionContext::cache and ::layer, attend() (every DecoderAttention
//     calls it), Decoder::forward(tokens, cache) and its member; compat::causal_attention_after; tied
//     embeddings: DecoderShape::tie_embeddings, TiedOutput, the virtual ModelSpec::ties_embeddings;
//     GroupedExperts::matmul (ExpertMatmul, float8 experts)
// 18: NamedParameter::layout and ::mesh (an optimizer sees where each parameter lives: Muon)
// 19: Linear::bias (optional); RotateHalfRotary in core; RoutedExperts (GroupedExperts derives from it, MoE
//     takes a model's own); MoEOptions::router_bias; TpStyle::per_head (GPT-OSS); CausalLM::set_objective and
//     training_loss (the schedules apply it), the virtual Decoder::head, CausalLM::stage_tokens and the virtual
//     ModelSpec::head_needs_embeddings (DeepSeek-V3's multi-token prediction, under a pipeline too)
// 20: StepHookContext::sum_over_replica_groups (MoE load balancing under fault tolerance)
// 21: GroupedExperts::grouped_matmul (ExpertGroupedMatmul: float8 experts' `_scaled_grouped_mm`)
// 22: RoutedExperts::runs_on_device_counts and forward_on_device_counts, DispatchedTokens::counts (MoE without
//     a read of its counts on the host)
constexpr int kPluginAbiVersion = 22;

// The kinds a plugin registers one factory of: name, interface, PluginKind
// bit. The enum below (kind_model, ...), the registrar's methods (model(),
// ...), the registry's slots and create_model(), ... and `titan plugins
// inspect` are generated from this one list, so that no kind is half wired.
// A new kind: a row here (and the ABI bump), its interface's header in
// plugin_interfaces.hpp, its name in cmake/TitanPlugin.cmake (docs/plugins.md,
// "Adding a plugin kind"). The rows are the registrar's vtable order: append.
#define TITAN_SINGLE_FACTORY_KINDS(KIND) \
  KIND(model, ModelSpec, 0)              \
  KIND(parallelizer, Parallelizer, 1)    \
  KIND(microbatch_runner, MicrobatchRunner, 2) \
  KIND(optimizer, OptimizerFactory, 3)   \
  KIND(lr_schedule, LrSchedule, 4)       \
  KIND(precision, PrecisionPolicy, 5)    \
  KIND(checkpointer, Checkpointer, 6)    \
  KIND(comm_observer, CommObserver, 7)   \
  KIND(metrics_sink, MetricsSink, 8)    \
  KIND(pipeline_splitter, PipelineSplitter, 10)

enum PluginKind : uint32_t {
#define TITAN_KIND_BIT(kind, Interface, bit) kind_##kind = 1u << bit,
  TITAN_SINGLE_FACTORY_KINDS(TITAN_KIND_BIT)
#undef TITAN_KIND_BIT
  // The one named kind: a plugin registers several, each under the name
  // users write (PluginRegistrar::pipeline_schedule).
  kind_pipeline_schedule = 1u << 9,
};
std::string kinds_to_string(uint32_t kinds);

#define TITAN_DECLARE_INTERFACE(kind, Interface, bit) class Interface;
TITAN_SINGLE_FACTORY_KINDS(TITAN_DECLARE_INTERFACE)
#undef TITAN_DECLARE_INTERFACE
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
  // model(Factory<ModelSpec>), parallelizer(Factory<Parallelizer>), ...
#define TITAN_REGISTRAR_METHOD(kind, Interface, bit) virtual void kind(Factory<Interface> factory) = 0;
  TITAN_SINGLE_FACTORY_KINDS(TITAN_REGISTRAR_METHOD)
#undef TITAN_REGISTRAR_METHOD
  // One call per schedule (a plugin may register several); `name` as users write it in
  // pipeline_parallel_schedule (matched case-insensitively), equal to the object's name().
  virtual void pipeline_schedule(const std::string& name, Factory<PipelineSchedule> factory) = 0;
  // What the plugin writes into a config `titan plan` chose (plan_entry.hpp); optional.
  virtual void plan_entry(PlanEntry entry) = 0;
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

// The factory most plugins register: `read` turns the options into what a
// T is built from. It takes the options (const ConfigNode&) or, when it
// needs the job too (dump folder, rank, training steps), the PluginContext:
//   registrar.parallelizer(titan::make_factory<FsdpParallelizer>(read_options));
template <class T, class Read>
auto make_factory(Read read) {
  return [read](const PluginContext& context) {
    if constexpr (std::is_invocable_v<Read, const ConfigNode&>) {
      return std::make_unique<T>(read(context.options));
    } else {
      return std::make_unique<T>(read(context));
    }
  };
}

// The factory of a T without options: registrar.parallelizer(titan::make_factory<LossParallel>()).
template <class T>
auto make_factory() {
  return [](const PluginContext&) { return std::make_unique<T>(); };
}

// Stands in for TITAN_PLUGIN_NAME where titan_add_plugin did not define it,
// to fail the build with a message rather than an unknown identifier.
template <bool defined_by_cmake>
constexpr const char* plugin_name_from_cmake() {
  static_assert(defined_by_cmake,
                "TITAN_PLUGIN_NAME comes from titan_add_plugin(NAME ...) in CMake; a library built without it "
                "writes its name itself: TITAN_PLUGIN(\"name\", ...)");
  return "";
}

}  // namespace titan

// The plugin's name as titan_add_plugin(NAME ...) gives it, so that the
// descriptor's name and the file's (libtitan_plugin_NAME.so) cannot differ
// and one source builds under several names (the test mutants).
#ifndef TITAN_PLUGIN_NAME
#define TITAN_PLUGIN_NAME ::titan::plugin_name_from_cmake<false>()
#endif

#define TITAN_PLUGIN_ENTRY titan_plugin_descriptor
#define TITAN_PLUGIN_ENTRY_NAME "titan_plugin_descriptor"

// Defines the plugin's one exported symbol. Use once per plugin library,
// with TITAN_PLUGIN_NAME as NAME.
#define TITAN_PLUGIN(NAME, VERSION, KINDS, SUMMARY, REGISTER_FN)                      \
  extern "C" __attribute__((visibility("default"))) const ::titan::PluginDescriptor* \
  TITAN_PLUGIN_ENTRY() {                                                               \
    static const ::titan::PluginDescriptor descriptor{                                 \
        ::titan::kPluginAbiVersion, NAME, VERSION, ::titan::torch_version_string(),    \
        static_cast<uint32_t>(KINDS), SUMMARY, REGISTER_FN};                           \
    return &descriptor;                                                                \
  }

// A plugin of one kind whose object is built from its options (or from
// nothing): its registration and descriptor in one statement, e.g.
//   TITAN_PLUGIN_OF(parallelizer, FsdpParallelizer, "1.0", "fully sharded data parallel", read_options)
// (the last argument goes to make_factory: a reader of the options or of
// the PluginContext, or none).
#define TITAN_PLUGIN_OF(KIND, TYPE, VERSION, SUMMARY, ...)                           \
  static void titan_register_plugin_factories(::titan::PluginRegistrar& registrar) { \
    registrar.KIND(::titan::make_factory<TYPE>(__VA_ARGS__));                        \
  }                                                                                  \
  TITAN_PLUGIN(TITAN_PLUGIN_NAME, VERSION, ::titan::kind_##KIND, SUMMARY, titan_register_plugin_factories)

// The same for a plugin that also writes its entry of the configs `titan
// plan` chooses (PLAN_ENTRY: a PlanEntry, titan/plan_entry.hpp).
#define TITAN_PLUGIN_OF_PLANNED(KIND, TYPE, VERSION, SUMMARY, PLAN_ENTRY, ...)          \
  static void titan_register_plugin_factories(::titan::PluginRegistrar& registrar) { \
    registrar.KIND(::titan::make_factory<TYPE>(__VA_ARGS__));                        \
    registrar.plan_entry(PLAN_ENTRY);                                                \
  }                                                                                  \
  TITAN_PLUGIN(TITAN_PLUGIN_NAME, VERSION, ::titan::kind_##KIND, SUMMARY, titan_register_plugin_factories)

#include "titan/compat.hpp"
