// The `expert_parallel` plugin (plugins/expert_parallel) through the
// registry, in process: its option with TorchTitan's default, the sparse
// mesh split it declares, and the refusals of validate() naming the key.
// Training on real ranks: integration/expert_parallel_e2e_test.cpp.
#include "plugin_support.hpp"

namespace {

using titan::test::create_parallelizer;
using titan::test::error_of;
using titan::test::has;

// qwen3 debugmodel_moe shrunk to 2 MoE blocks of `experts` experts, top 2.
std::string moe(int experts) {
  return "  flavor: debugmodel_moe\n  dim: 64\n  n_layers: 2\n  n_heads: 4\n  n_kv_heads: 2\n  head_dim: 16\n"
         "  moe_hidden_dim: 32\n  top_k: 2\n  num_experts: " + std::to_string(experts) + "\n";
}

std::unique_ptr<titan::ModelSpec> qwen3_moe_spec(const std::string& model) {
  titan::PluginContext context;
  context.options = titan::ConfigNode::parse("model:\n" + model, "run.yaml").child("model");
  return titan::PluginRegistry::instance().create_model("qwen3", context);
}

std::string validate_ep(const std::string& options, const std::map<std::string, int64_t>& degrees,
                     const std::string& model = moe(8)) {
  auto spec = qwen3_moe_spec(model);
  return error_of([&] { create_parallelizer("expert_parallel", options)->validate({*spec, degrees, 64, {}}); });
}

}  // namespace

TEST_CASE("expert_parallel plugin: expert_parallel_degree 1 by default (documented), and a degree > 1 declares "
          "the split dp_shard_cp_tp = efsdp x ep") {
  titan::PluginContext context = titan::test::plugin_context("");
  auto ep = titan::PluginRegistry::instance().create_parallelizer("expert_parallel", context);
  titan::test::check_documented(context.options, {"expert_parallel_degree"});
  CHECK(titan::test::resolved(context.options).get<int64_t>("expert_parallel_degree", 0) == 1);
  CHECK((ep->apply_order() == titan::ApplyOrder::tensor_parallel));
  CHECK(ep->mesh_dims().empty());  // it borrows ranks, it asks for none
  CHECK(ep->mesh_splits().empty());
  auto splits = create_parallelizer("expert_parallel", "{expert_parallel_degree: 4}")->mesh_splits();
  REQUIRE(splits.size() == 1);
  CHECK(splits[0].span == "dp_shard_cp_tp");
  CHECK(splits[0].outer == "efsdp");
  CHECK(splits[0].inner == "ep");
  CHECK(splits[0].inner_degree == 4);
  CHECK(has(titan::test::parallelizer_refusal("expert_parallel", "{expert_parallel_degree: -1}"),
            "expert_parallel_degree"));
}

TEST_CASE("expert_parallel plugin: validate() refuses a degree dividing neither the experts nor dp_shard x cp, "
          "tensor parallelism, and a dense model, naming the key") {
  CHECK(validate_ep("{expert_parallel_degree: 2}", {{"dp_shard", 4}, {"cp", 1}, {"tp", 1}}) == "<no error>");
  CHECK(validate_ep("{expert_parallel_degree: 4}", {{"dp_shard", 2}, {"cp", 2}}) == "<no error>");  // 4 of dp_shard x cp
  CHECK(validate_ep("{expert_parallel_degree: 2}", {}) == "<no error>");  // degrees unknown yet
  std::string experts = validate_ep("{expert_parallel_degree: 4}", {{"dp_shard", 4}}, moe(6));
  CHECK_MESSAGE(has(experts, "plugins: expert_parallel.expert_parallel_degree = 4 does not divide the 6 routed "
                             "experts of layers.0.moe (model.num_experts)"),
                experts);
  std::string ranks = validate_ep("{expert_parallel_degree: 4}", {{"dp_shard", 6}});
  CHECK_MESSAGE(has(ranks, "expert_parallel_degree = 4 does not divide data_parallel_shard_degree x "
                           "context_parallel_degree x tensor_parallel_degree = 6 x 1 x 1 = 6"),
                ranks);
  // ep borrows the tp ranks too (TorchTitan's ep = dp_shard x cp x tp).
  CHECK(validate_ep("{expert_parallel_degree: 4}", {{"dp_shard", 2}, {"tp", 2}}) == "<no error>");
  CHECK(has(validate_ep("{expert_parallel_degree: 4}", {{"dp_shard", 3}, {"tp", 2}}), "= 3 x 1 x 2 = 6"));
  std::string dense = validate_ep("{expert_parallel_degree: 2}", {{"dp_shard", 2}}, "  flavor: debugmodel\n  dim: 64\n  n_layers: 2\n");
  CHECK_MESSAGE(has(dense, "has no MoE layers"), dense);
}
