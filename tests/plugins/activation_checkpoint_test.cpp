// The `activation_checkpoint` plugin (plugins/activation_checkpoint) through
// the registry, in process: its options with TorchTitan's defaults (every
// 2nd block), the values it accepts, and bad options refused naming the key
// and what was expected. Training with each mode, under FSDP, DDP and TP,
// and determinism_check: integration/activation_checkpoint_e2e_test.cpp.
#include "plugin_support.hpp"

namespace {

using titan::test::create_parallelizer;
using titan::test::error_of;
using titan::test::parallelizer_refusal;
using titan::test::has;

}  // namespace

TEST_CASE("activation_checkpoint plugin: selective every 2nd block, no RNG replay, shape checks and a 0.5 budget "
          "unless set; each option documented") {
  titan::PluginContext context = titan::test::plugin_context("");
  auto ac = titan::PluginRegistry::instance().create_parallelizer("activation_checkpoint", context);
  titan::test::check_documented(context.options,
                                {"mode", "selective_ac_option", "preserve_rng_state", "determinism_check",
                                 "per_op_sac_force_recompute_mm_shapes_by_fqns", "memory_budget"});
  titan::ConfigNode resolved = titan::test::resolved(context.options);
  CHECK(resolved.get<std::string>("mode", "") == "selective");
  CHECK(resolved.get<std::string>("selective_ac_option", "") == "2");
  CHECK(resolved.get<bool>("preserve_rng_state", true) == false);
  CHECK(resolved.get<std::string>("determinism_check", "") == "default");
  CHECK(resolved.get<std::vector<std::string>>("per_op_sac_force_recompute_mm_shapes_by_fqns", {"?"}).empty());
  CHECK(resolved.get<double>("memory_budget", 0) == 0.5);

  CHECK((ac->apply_order() == titan::ApplyOrder::activation_checkpoint));
  CHECK(ac->mesh_dims().empty());
  CHECK_FALSE(ac->allows_split_backward());  // it recomputes when backward reaches a block
}

TEST_CASE("activation_checkpoint plugin: every mode, op or a block frequency, and a budget from 0 to 1 are "
          "accepted") {
  for (const char* options :
       {"{mode: none}", "{mode: full}", "{mode: selective, selective_ac_option: op}",
        "{mode: selective, selective_ac_option: 1}", "{mode: selective, selective_ac_option: '3'}",
        "{mode: memory_budget, memory_budget: 0}", "{mode: memory_budget, memory_budget: 1}",
        "{determinism_check: values, preserve_rng_state: true}",
        "{selective_ac_option: op, per_op_sac_force_recompute_mm_shapes_by_fqns: [feed_forward.w2]}"}) {
    CAPTURE(options);
    CHECK(parallelizer_refusal("activation_checkpoint", options) == "<no error>");
  }
}

TEST_CASE("activation_checkpoint plugin: bad options are refused naming the key and what was expected") {
  std::string mode = parallelizer_refusal("activation_checkpoint", "{mode: sometimes}");
  CHECK(has(mode, "run.yaml:1:"));
  CHECK(has(mode, "mode: expected one of {none, full, selective, memory_budget}, got \"sometimes\""));
  CHECK(has(parallelizer_refusal("activation_checkpoint", "{memory_budget: 1.5}"), "memory_budget: expected a number in [0, 1], got 1.5"));
  CHECK(has(parallelizer_refusal("activation_checkpoint", "{memory_budget: -0.1}"), "memory_budget: expected a number in [0, 1], got -0.1"));
  CHECK(has(parallelizer_refusal("activation_checkpoint", "{selective_ac_option: every}"),
            "selective_ac_option: expected \"op\" or a block frequency N >= 1, got \"every\""));
  CHECK(has(parallelizer_refusal("activation_checkpoint", "{selective_ac_option: 0}"),
            "selective_ac_option: expected \"op\" or a block frequency N >= 1, got \"0\""));
  CHECK(has(parallelizer_refusal("activation_checkpoint", "{selective_ac_option: -1}"),
            "selective_ac_option: expected \"op\" or a block frequency N >= 1, got \"-1\""));
  CHECK(has(parallelizer_refusal("activation_checkpoint", "{determinism_check: maybe}"),
            "determinism_check: expected one of {none, default, values}, got \"maybe\""));
  CHECK(has(parallelizer_refusal("activation_checkpoint", "{preserve_rng_state: yes please}"), "preserve_rng_state: expected bool"));
}
