// `titan plan --model`'s parts: the device table, the step estimate and the
// layout search, whose every config must pass what `titan config check
// --world-size N` checks.
#include "doctest_torch.hpp"

#include <nlohmann/json.hpp>

#include "test_support.hpp"
#include "titan/device_mesh.hpp"
#include "titan/device_table.hpp"
#include "titan/layout_search.hpp"
#include "titan/plan_entry.hpp"
#include "titan/registry.hpp"
#include "titan/run_spec.hpp"
#include "titan/step_estimate.hpp"

using titan::test::has;

namespace {

titan::SearchRequest llama3_8b_on_8() {
  titan::SearchRequest request;
  request.model = "llama3";
  request.flavor = "8B";
  request.device = "h100-80gb";
  request.devices = 8;
  request.seq_len = 8192;
  request.global_batch_tokens = 16 * 8192;  // TorchTitan's 8-GPU run: local batch 2 on FSDP 8
  return request;
}

// The same data-parallel traffic on `mesh`, every rank doing `flops`.
titan::StepEstimate gather_step(const titan::MeshShape& mesh, double flops) {
  titan::StepWork work;
  work.flops = work.model_flops = flops;
  work.tokens = 8192;
  work.traffic.push_back({"dp_shard", "all_gather", 16e9, 64});
  work.overlap_units = 32;
  return titan::estimate_step(work, mesh, titan::find_device("h100-80gb"));
}

}  // namespace

TEST_SUITE("layout_search") {
  TEST_CASE("the device table has the issue's devices; an unknown one names them") {
    const titan::DeviceSpec h100 = titan::find_device("h100-80gb");
    CHECK(h100.bf16_flops == doctest::Approx(989.4e12));
    CHECK(h100.fp8_flops == doctest::Approx(2 * h100.bf16_flops).epsilon(0.01));
    CHECK(h100.devices_per_node == 8);
    CHECK(h100.memory_bytes > int64_t{79} << 30);
    CHECK(titan::find_device("H200").memory_bytes > int64_t{139} << 30);  // names are case-insensitive
    CHECK(titan::find_device("b200").intra_node_bytes_per_s == doctest::Approx(2 * h100.intra_node_bytes_per_s));
    CHECK_FALSE(titan::find_device("a100-80gb").has_float8());
    CHECK(titan::find_device("cpu").bf16_flops > 0);  // measured here
    CHECK_THROWS_WITH_AS(titan::find_device("h100"),
                         doctest::Contains("unknown device 'h100'; known devices: h100-80gb, h200, b200, a100-80gb, cpu"),
                         titan::Error);
  }

  TEST_CASE("mesh dims sit within a node while the dims inside them hold at most a node's devices") {
    const titan::MeshShape fsdp_tp{1, 1, 32, 1, 8, 1};
    CHECK(titan::within_node(fsdp_tp, "tp", 8));
    CHECK_FALSE(titan::within_node(fsdp_tp, "dp_shard", 8));
    const titan::MeshShape small{1, 1, 4, 1, 2, 1};
    CHECK(titan::within_node(small, "dp_shard", 8));
    CHECK(titan::within_node(small, "dp_shard_cp_tp", 8));
    CHECK(titan::group_size(fsdp_tp, "world") == 256);
    CHECK_THROWS_WITH_AS(titan::group_size(fsdp_tp, "dq"), doctest::Contains("unknown mesh dim 'dq'"), titan::Error);
  }

  TEST_CASE("step estimate: the same traffic is slower between nodes, the same work faster on more devices") {
    // dp_shard 8 alone fits a node; under tp 2 its groups span two nodes.
    const titan::StepEstimate intra = gather_step({1, 1, 8, 1, 1, 1}, 1e15);
    const titan::StepEstimate inter = gather_step({1, 1, 8, 1, 2, 1}, 1e15);
    REQUIRE(intra.comm.size() == 1);
    REQUIRE(inter.comm.size() == 1);
    CHECK(intra.comm[0].within_node);
    CHECK_FALSE(inter.comm[0].within_node);
    CHECK(inter.comm[0].seconds > 5 * intra.comm[0].seconds);  // 450 GB/s NVLink against a 50 GB/s NIC
    CHECK(inter.step_s > intra.step_s);
    CHECK_FALSE(intra.assumptions.empty());

    titan::SearchRequest request = llama3_8b_on_8();
    const titan::SearchResult on_8 = titan::search_layouts(request);
    request.devices = 16;
    const titan::SearchResult on_16 = titan::search_layouts(request);
    REQUIRE_FALSE(on_8.top.empty());
    REQUIRE_FALSE(on_16.top.empty());
    CHECK(on_16.top[0].estimate.step_s < on_8.top[0].estimate.step_s);
  }

  TEST_CASE("llama3 8B on 8 H100s: layouts that fit, each config passing config check at world size 8") {
    const titan::SearchResult result = titan::search_layouts(llama3_8b_on_8());
    REQUIRE(result.nothing_fits.empty());
    REQUIRE_FALSE(result.top.empty());
    CHECK(result.refused.empty());
    const double budget = 0.9 * static_cast<double>(result.device.memory_bytes);
    for (size_t i = 0; i < result.top.size(); ++i) {
      const titan::LayoutPlan& plan = result.top[i];
      CAPTURE(plan.yaml);
      CHECK(plan.layout.mesh.world() == 8);
      CHECK(plan.memory.total() <= budget);
      CHECK(plan.estimate.mfu > 0.1);
      CHECK(plan.estimate.mfu < 0.6);
      if (i > 0) CHECK(plan.estimate.tokens_per_s <= result.top[i - 1].estimate.tokens_per_s * 1.005);
      // What `titan config check CONFIG --world-size 8` runs.
      titan::RunSpec run = titan::resolve_run(titan::ConfigNode::parse(plan.yaml, "layout.yaml"), 0, 8);
      const auto degrees = titan::resolve_mesh_degrees(titan::mesh_requests(run), 8);
      CHECK_NOTHROW(titan::validate_parallelism(run, degrees));
    }
  }

  TEST_CASE("nothing fits: the message names the memory or the devices that would fit the smallest layout") {
    titan::SearchRequest request = llama3_8b_on_8();
    request.flavor = "405B";
    request.devices = 8;
    request.global_batch_tokens = 8 * 8192;
    const titan::SearchResult result = titan::search_layouts(request);
    CHECK(result.top.empty());
    CHECK(result.memory_needed_bytes > static_cast<double>(result.device.memory_bytes));
    CHECK(result.fewest_devices >= 16);
    CHECK_MESSAGE(has(result.nothing_fits, "no layout of llama3 405B fits 8 x h100-80gb"), result.nothing_fits);
    CHECK_MESSAGE(has(result.nothing_fits, "a device of at least "), result.nothing_fits);
    CHECK_MESSAGE(
        has(result.nothing_fits, "would fit it; or " + std::to_string(result.fewest_devices) +
                                     " x h100-80gb (doubling from 8, the first count on which a layout fits)"),
        result.nothing_fits);
  }

  TEST_CASE("the JSON result parses and carries each layout's config and estimate") {
    titan::SearchRequest request = llama3_8b_on_8();
    request.top = 2;
    const titan::SearchResult result = titan::search_layouts(request);
    const nlohmann::json json = nlohmann::json::parse(titan::search_result_json(result));
    CHECK(json["request"]["devices"] == 8);
    CHECK(json["device"]["name"] == "h100-80gb");
    REQUIRE(json["layouts"].size() == result.top.size());
    CHECK(json["layouts"][0]["yaml"] == result.top[0].yaml);
    CHECK(json["layouts"][0]["estimate"]["tokens_per_s"].get<double>() > 0);
    CHECK(json["nothing_fits"].is_null());
    CHECK_FALSE(json["assumptions"].empty());
  }

  TEST_CASE("bad requests name what is known or expected") {
    CHECK_THROWS_WITH_AS(titan::read_model_shape("lama3", "8B", 8192),
                         doctest::Contains("unknown model 'lama3'; model plugins on the path: "), titan::Error);
    CHECK_THROWS_WITH_AS(titan::read_model_shape("lama3", "8B", 8192), doctest::Contains("llama3"), titan::Error);
    CHECK_THROWS_WITH_AS(titan::read_model_shape("llama3", "9B", 8192), doctest::Contains("405B"), titan::Error);
    titan::SearchRequest request = llama3_8b_on_8();
    request.global_batch_tokens = 8192 * 3 + 1;
    CHECK_THROWS_WITH_AS(titan::search_layouts(request), doctest::Contains("not a whole number of sequences"),
                         titan::Error);
    request = llama3_8b_on_8();
    request.fixed = {{"tq", 2}};
    CHECK_THROWS_WITH_AS(titan::search_layouts(request), doctest::Contains("unknown mesh dim 'tq'"), titan::Error);
  }

  TEST_CASE("each role's plugin writes its own entry of a planned config, and one that writes none is named") {
    titan::PluginRegistry& registry = titan::PluginRegistry::instance();
    titan::PlannedLayout layout;
    layout.dp_shard = 4;
    layout.tp = 2;
    layout.pp = 2;
    layout.pp_schedule = "1F1B";
    layout.pp_microbatch_size = 1;
    layout.pp_microbatches = 8;
    layout.activation_checkpoint = "every_2nd";
    std::string written;
    for (const char* role : titan::kPlanRoles) {
      const std::string plugin = titan::PluginRegistry::default_plugin(std::string("plan.") + role);
      REQUIRE_MESSAGE(!plugin.empty(), role);
      written += registry.plan_entry(plugin, layout);
    }
    CAPTURE(written);
    // Under a pipeline TP runs without sequence parallelism; no cp, ep or float8 entry.
    CHECK(has(written, "  - name: fsdp\n    dp_shard: 4\n  - name: tensor_parallel\n    tensor_parallel_degree: 2\n"
                       "    enable_sequence_parallel: false\n  - name: loss_parallel\n  - name: pipeline\n"));
    CHECK(has(written, "selective_ac_option: \"2\""));
    CHECK_FALSE(has(written, "context_parallel"));
    CHECK_FALSE(has(written, "float8"));
    // What the plugins wrote is a plugins: list the trainer accepts on 4 x 2 x 2 ranks.
    const std::string yaml = "model: {name: llama3, flavor: debugmodel}\ntraining: {local_batch_size: 8}\nplugins:\n" +
                             written;
    titan::RunSpec run = titan::resolve_run(titan::ConfigNode::parse(yaml, "planned.yaml"), 0, 16);
    CHECK_NOTHROW(titan::validate_parallelism(run, titan::resolve_mesh_degrees(titan::mesh_requests(run), 16)));
    // adamw has no role: asked anyway, the error names it.
    CHECK_THROWS_WITH_AS(registry.plan_entry("adamw", layout), doctest::Contains("plugin 'adamw'"), titan::Error);
    layout.activation_checkpoint = "every_3rd";
    CHECK_THROWS_WITH_AS(registry.plan_entry("activation_checkpoint", layout), doctest::Contains("every_3rd"),
                         titan::Error);
  }
}
