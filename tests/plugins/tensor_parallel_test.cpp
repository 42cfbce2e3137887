// The `tensor_parallel` plugin (plugins/tensor_parallel) through the
// registry, in process: its options with TorchTitan's defaults, and the
// refusals of validate() (sizes the degree does not divide, sequence
// parallelism with pp > 1) and of bad options, naming the key and what
// would work. Training on real ranks: integration/tensor_parallel_e2e_test.cpp.
#include "plugin_support.hpp"

namespace {

using titan::test::create_parallelizer;
using titan::test::debugmodel;
using titan::test::error_of;
using titan::test::has;

// validate() of tensor_parallel with `options` on the debug model (16 heads,
// 16 kv heads, FFN 768, vocabulary 2048).
std::string validate_tp(const std::string& options, const std::map<std::string, int64_t>& degrees,
                     int64_t seq_len = 128) {
  auto spec = debugmodel();
  return error_of([&] { create_parallelizer("tensor_parallel", options)->validate({*spec, degrees, seq_len, {}}); });
}

}  // namespace

TEST_CASE("tensor_parallel plugin: tensor_parallel_degree -1, sequence parallel on, async off by default; each "
          "option documented") {
  titan::PluginContext context = titan::test::plugin_context("");
  auto tp = titan::PluginRegistry::instance().create_parallelizer("tensor_parallel", context);
  titan::test::check_documented(
      context.options, {"tensor_parallel_degree", "enable_sequence_parallel", "enable_async_tensor_parallel"});
  titan::ConfigNode resolved = titan::test::resolved(context.options);
  CHECK(resolved.get<int64_t>("tensor_parallel_degree", 0) == -1);
  CHECK(resolved.get<bool>("enable_sequence_parallel", false) == true);
  CHECK(resolved.get<bool>("enable_async_tensor_parallel", true) == false);

  CHECK((tp->apply_order() == titan::ApplyOrder::tensor_parallel));
  auto dims = tp->mesh_dims();
  REQUIRE(dims.size() == 1);
  CHECK(dims[0].dim == "tp");
  CHECK(dims[0].degree == -1);
  CHECK(create_parallelizer("tensor_parallel", "{tensor_parallel_degree: 4}")->mesh_dims()[0].degree == 4);
}

TEST_CASE("tensor_parallel plugin: sequence parallelism refuses pipeline_parallel_degree > 1 for now") {
  std::string sp = validate_tp("{tensor_parallel_degree: 2}", {{"tp", 2}, {"pp", 2}});
  CHECK(has(sp, "tensor_parallel: enable_sequence_parallel with pipeline_parallel_degree = 2 is not supported yet"));
  CHECK(has(sp, "set enable_sequence_parallel: false"));
  CHECK(validate_tp("{tensor_parallel_degree: 2, enable_sequence_parallel: false}", {{"tp", 2}, {"pp", 2}}) ==
        "<no error>");
}

TEST_CASE("tensor_parallel plugin: validate() refuses a degree that does not divide the heads or the sequence, "
          "naming the key and a degree that would work") {
  CHECK(validate_tp("{}", {{"tp", 2}}) == "<no error>");
  CHECK(validate_tp("{}", {}) == "<no error>");  // tp -1 without --world-size: nothing to check yet
  CHECK(validate_tp("{}", {{"tp", 3}}) ==
        "tensor_parallel: model.n_heads: attention heads = 16 is not divisible by tensor_parallel_degree 3; use a "
        "degree dividing 16 (e.g. 2) or change model.n_heads");
  // Sequence parallelism shards the sequence too: seq_len must split, unless it is off.
  CHECK(validate_tp("{}", {{"tp", 2}}, 127) ==
        "tensor_parallel: training.seq_len = 127 is not divisible by tensor_parallel_degree 2 with "
        "enable_sequence_parallel on; use a multiple of 2 or set enable_sequence_parallel: false");
  CHECK(validate_tp("{enable_sequence_parallel: false}", {{"tp", 2}}, 127) == "<no error>");
}

TEST_CASE("tensor_parallel plugin: bad options are refused naming the key and what was expected") {
  auto refusal = [](const std::string& options) {
    return error_of([&] { create_parallelizer("tensor_parallel", options); });
  };
  std::string zero = refusal("{tensor_parallel_degree: 0}");
  CHECK(has(zero, "run.yaml:1:"));
  CHECK(has(zero, "tensor_parallel_degree: expected a degree >= 1 or -1 (-1: the rest of the world), got 0"));
  CHECK(has(refusal("{enable_sequence_parallel: sometimes}"), "enable_sequence_parallel: expected bool"));
  CHECK(has(refusal("{enable_sequence_parallel: false, enable_async_tensor_parallel: true}"),
            "enable_async_tensor_parallel: async TP overlaps the sequence-parallel collectives; set "
            "enable_sequence_parallel: true"));
  CHECK(refusal("{enable_async_tensor_parallel: true}") == "<no error>");  // sequence parallel is on by default
}
