// A searched layout as a run config (the shipped configs' shape and knob
// names), and the check `titan config check --world-size N` makes of it.
#include <cmath>
#include <cstdio>
#include <sstream>

#include "titan/assets.hpp"
#include "titan/error.hpp"
#include "titan/device_mesh.hpp"
#include "titan/layout_search.hpp"
#include "titan/plan_entry.hpp"
#include "titan/registry.hpp"
#include "titan/run_spec.hpp"
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

PlannedLayout planned(const Layout& layout) {
  PlannedLayout out;
  const MeshShape& mesh = layout.mesh;
  out.dp_replicate = mesh.dp_replicate;
  out.dp_shard = mesh.dp_shard;
  out.tp = mesh.tp;
  out.cp = mesh.cp;
  out.pp = mesh.pp;
  out.ep = mesh.ep;
  out.pp_schedule = layout.schedule;
  out.pp_microbatch_size = layout.microbatch_size;
  out.pp_microbatches = layout.microbatches;
  switch (layout.ac) {
    case AcMode::none: out.activation_checkpoint = "none"; break;
    case AcMode::every_2nd: out.activation_checkpoint = "every_2nd"; break;
    case AcMode::op: out.activation_checkpoint = "op"; break;
    case AcMode::full: out.activation_checkpoint = "full"; break;
  }
  out.float8 = layout.float8;
  return out;
}

// Each role's plugin (the build's plan.<role>) writes its own entry.
void write_plugins(std::ostream& out, const Layout& layout) {
  const PlannedLayout chosen = planned(layout);
  out << "plugins:\n";
  for (const char* role : kPlanRoles) {
    const std::string key = std::string("plan.") + role;
    const std::string plugin = PluginRegistry::default_plugin(key);
    if (plugin.empty()) {
      throw Error("titan plan: this build gives no plugin the role '" + std::string(role) +
                  "'; add " + key + "=<plugin> to TITAN_PLAN_PLUGINS and rebuild");
    }
    out << PluginRegistry::instance().plan_entry(plugin, chosen);
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
  RunSpec plan = resolve_run(ConfigNode::parse(yaml, "<titan plan layout>"), 0, static_cast<int>(world_size));
  // As `config check`: the tokenizer's vocabulary when its file is there,
  // the flavor's otherwise.
  try {
    plan.model->set_vocab_size(load_tokenizer(resolve_asset(plan.core.tokenizer_path))->vocab_size());
  } catch (const Error&) {
  }
  validate_parallelism(plan, resolve_mesh_degrees(mesh_requests(plan), static_cast<int>(world_size)));
}

}  // namespace titan
