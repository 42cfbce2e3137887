// The `activation_checkpoint` plugin: options (TorchTitan's names) and the
// descriptor.
#include "ac_parallelizer.h"
#include "titan/error.hpp"
#include "titan/plugin.hpp"

namespace {

using titan::activation_checkpoint::AcOptions;

AcOptions read_options(const titan::ConfigNode& node) {
  AcOptions options;
  options.mode = node.choice("mode", options.mode, {"none", "full", "selective", "memory_budget"},
                             "none | full (every block) | selective (see selective_ac_option) | memory_budget");
  options.selective_ac_option = node.get<std::string>(
      "selective_ac_option", options.selective_ac_option,
      "selective mode: N checkpoints every N-th block; \"op\" keeps attention and every other matmul "
      "output of every block and recomputes the rest");
  options.preserve_rng_state = node.get<bool>("preserve_rng_state", options.preserve_rng_state,
                                              "replay the random generator's state in the recompute");
  options.determinism_check = node.choice(
      "determinism_check", options.determinism_check, {"none", "default", "values"},
      "compare the recomputed forward with the original: default = shapes and dtypes, values = also every value");
  options.per_op_sac_force_recompute_mm_shapes_by_fqns = node.get<std::vector<std::string>>(
      "per_op_sac_force_recompute_mm_shapes_by_fqns", options.per_op_sac_force_recompute_mm_shapes_by_fqns,
      "per-op mode: block-relative paths of linears always recomputed (e.g. feed_forward.w2)");
  options.memory_budget = node.number(
      "memory_budget", options.memory_budget, titan::NumberRange::closed(0, 1),
      "memory_budget mode: activation bytes kept / bytes without checkpointing, in [0, 1]");
  if (options.selective_ac_option != "op") {
    bool number = !options.selective_ac_option.empty() &&
                  options.selective_ac_option.find_first_not_of("0123456789") == std::string::npos;
    if (!number || std::stoll(options.selective_ac_option) < 1) {
      node.fail("selective_ac_option", "expected \"op\" or a block frequency N >= 1, got \"" +
                                           options.selective_ac_option + "\"");
    }
  }
  return options;
}

// titan plan's activation checkpointing modes in this plugin's options.
std::string plan_entry(const titan::PlannedLayout& layout, const std::string& name) {
  const std::string& mode = layout.activation_checkpoint;
  if (mode == "none") return "";
  if (mode == "every_2nd") return "  - name: " + name + "\n    mode: selective\n    selective_ac_option: \"2\"\n";
  if (mode == "op") return "  - name: " + name + "\n    mode: selective\n    selective_ac_option: op\n";
  if (mode == "full") return "  - name: " + name + "\n    mode: full\n";
  throw titan::Error("activation_checkpoint: titan plan asked for mode '" + mode + "', which it does not know");
}

}  // namespace

TITAN_PLUGIN_OF_PLANNED(parallelizer, titan::activation_checkpoint::AcParallelizer, "1.0",
                        "activation checkpointing: full, every N-th block, or planned to a memory budget", plan_entry,
                        read_options)
