// A searched layout as a run config (the shipped configs' shape and knob
// names), and the check `titan config check --world-size N` makes of it.
#include <cmath>
#include <cstdio>
#include <sstream>

#include "titan/assets.hpp"
#include "titan/device_mesh.hpp"
#include "titan/layout_search.hpp"
#include "titan/run_plan.hpp"
#include "titan/tokenizer.hpp"

#include "layout_cost.hpp"

namespace titan {

namespace {

std::string fixed(double value, int digits) {
  char text[48];
  std::snprintf(text, sizeof(text), "%.*f", digits, value);
  return text;
}

std::string launch_line(const DeviceSpec& device, int64_t devices) {
  const int64_t per_node = std::min(devices, device.devices_per_node);
  const int64_t nodes = (devices + per_node - 1) / per_node;
  if (nodes == 1) return "titan launch --nproc-per-node " + std::to_string(devices) + " -- titan train THIS.yaml";
  return "titan launch --nnodes " + std::to_string(nodes) + " --nproc-per-node " + std::to_string(per_node) +
         " ... -- titan train THIS.yaml";
}

void write_plugins(std::ostream& out, const Layout& layout) {
  const MeshShape& mesh = layout.mesh;
  out << "plugins:\n";
  out << "  - name: fsdp\n    dp_shard: " << mesh.dp_shard << "\n";
  if (mesh.dp_replicate > 1) out << "    dp_replicate: " << mesh.dp_replicate << "\n";
  if (mesh.tp > 1) {
    // Titan does not yet pass sequence shards across pipeline stages.
    out << "  - name: tensor_parallel\n    tensor_parallel_degree: " << mesh.tp
        << "\n    enable_sequence_parallel: " << (mesh.pp == 1 ? "true" : "false") << "\n";
    out << "  - name: loss_parallel\n";
  }
  if (mesh.cp > 1) {
    out << "  - name: context_parallel\n    context_parallel_degree: " << mesh.cp
        << "\n    context_parallel_rotate_method: alltoall   # K/V around the ring, overlapping attention\n";
  }
  if (mesh.pp > 1) {
    out << "  - name: pipeline\n    pipeline_parallel_degree: " << mesh.pp
        << "\n    pipeline_parallel_schedule: " << layout.schedule
        << "\n    pipeline_parallel_microbatch_size: " << layout.microbatch_size << "   # " << layout.microbatches
        << " microbatches a step\n";
  }
  if (mesh.ep > 1) out << "  - name: expert_parallel\n    expert_parallel_degree: " << mesh.ep << "\n";
  switch (layout.ac) {
    case AcMode::none: break;
    case AcMode::every_2nd:
      out << "  - name: activation_checkpoint\n    mode: selective\n    selective_ac_option: \"2\"\n";
      break;
    case AcMode::op:
      out << "  - name: activation_checkpoint\n    mode: selective\n    selective_ac_option: op\n";
      break;
    case AcMode::full: out << "  - name: activation_checkpoint\n    mode: full\n"; break;
  }
  if (layout.float8) {
    // FSDP's float8 all-gather does not reach layers TP wrapped.
    const bool gather_float8 = mesh.tp == 1;
    out << "  - name: float8\n    recipe_name: tensorwise\n    filter_fqns: [output]\n"
        << "    param_dtype: bfloat16\n    reduce_dtype: float32\n"
        << "    enable_fsdp_float8_all_gather: " << (gather_float8 ? "true" : "false") << "\n"
        << "    precompute_float8_dynamic_scale_for_fsdp: " << (gather_float8 ? "true" : "false") << "\n";
  }
}

}  // namespace

std::string layout_yaml(const SearchRequest& request, const ModelShape& model, const DeviceSpec& device,
                        const LayoutPlan& plan) {
  const Layout& layout = plan.layout;
  const StepEstimate& estimate = plan.estimate;
  const int64_t sequences = request.global_batch_tokens / request.seq_len;
  std::ostringstream out;
  out << "# titan plan: " << model.name << " " << model.flavor << " on " << request.devices << " x " << device.name
      << ", seq_len " << request.seq_len << ", " << request.global_batch_tokens << " tokens (" << sequences
      << " sequences) a step\n";
  out << "# layout: " << layout.mesh.to_string() << (layout.schedule.empty() ? "" : ", " + layout.schedule)
      << "; AC " << ac_mode_name(layout.ac) << "; float8 " << (layout.float8 ? "on" : "off") << "; local batch "
      << layout.local_batch_size
      << (layout.accumulation > 1 ? ", " + std::to_string(layout.accumulation) + " accumulation steps" : "") << "\n";
  out << "# predicted: " << gib(plan.memory.total()) << " a device at its peak (of "
      << gib(static_cast<double>(device.memory_bytes)) << ", " << std::lround(request.margin * 100)
      << "% usable), " << fixed(estimate.tokens_per_s_per_device, 0) << " tokens/s a device, MFU "
      << fixed(100 * estimate.mfu, 1) << "%; step " << fixed(estimate.step_s, 2) << " s = compute "
      << fixed(estimate.compute_s, 2) << " + exposed communication " << fixed(estimate.exposed_comm_s, 2)
      << " + pipeline bubble " << fixed(estimate.bubble_s, 2) << "\n";
  out << "#   " << launch_line(device, request.devices) << "\n";
  out << "job:\n  dump_folder: ./outputs/" << model.name << "_" << model.flavor << "_plan\n"
      << "  description: \"" << model.name << " " << model.flavor << ", " << layout.mesh.to_string()
      << " (titan plan)\"\n";
  out << "model:\n  name: " << model.name << "\n  flavor: \"" << model.flavor << "\"\n";
  if (request.tokenizer_path.empty()) {
    out << "  tokenizer_path: ./assets/tokenizer/SET_ME   # your data's tokenizer; planned with the flavor's "
        << model.vocab << " tokens\n";
  } else {
    out << "  tokenizer_path: " << request.tokenizer_path << "\n";
  }
  if (model.max_seq_len > 0 && model.max_seq_len < request.seq_len) {
    out << "  max_seq_len: " << request.seq_len << "   # the flavor's rotary tables stop at " << model.max_seq_len
        << "\n";
  }
  out << "training:\n  local_batch_size: " << layout.local_batch_size << "\n  global_batch_size: " << sequences
      << "\n  seq_len: " << request.seq_len << "\n  device: " << (device.name == "cpu" ? "cpu" : "cuda")
      << "\n  mixed_precision_param: bfloat16\n  mixed_precision_reduce: float32\n";
  write_plugins(out, layout);
  return out.str();
}

void check_layout_yaml(const std::string& yaml, int64_t world_size) {
  RunPlan plan = plan_run(ConfigNode::parse(yaml, "<titan plan layout>"), 0, static_cast<int>(world_size));
  // As `config check`: the tokenizer's vocabulary when its file is there,
  // the flavor's otherwise.
  try {
    plan.model->set_vocab_size(load_tokenizer(resolve_asset(plan.core.tokenizer_path))->vocab_size());
  } catch (const Error&) {
  }
  validate_parallelism(plan, resolve_mesh_degrees(mesh_requests(plan), static_cast<int>(world_size)));
}

}  // namespace titan
