// The `context_parallel` plugin (plugins/context_parallel) through the
// registry, in process: its options with their defaults, and the refusals
// of validate() (pp > 1, no data-parallel plugin to average over cp, a
// sequence or head count the degree does not split) and of bad options,
// naming the key and what would work. Training on real ranks:
// integration/context_parallel_e2e_test.cpp.
#include "plugin_support.hpp"

namespace {

using titan::ApplyOrder;
using titan::test::create_parallelizer;
using titan::test::debugmodel;
using titan::test::error_of;
using titan::test::has;

// validate() of context_parallel with `options` on the debug model (16
// heads), the run's parallelizers at `apply_orders` (fsdp's data_parallel
// unless said otherwise).
std::string validate_cp(const std::string& options, const std::map<std::string, int64_t>& degrees,
                     int64_t seq_len = 128,
                     const std::vector<ApplyOrder>& apply_orders = {ApplyOrder::context_parallel,
                                                                    ApplyOrder::data_parallel}) {
  auto spec = debugmodel();
  return error_of(
      [&] { create_parallelizer("context_parallel", options)->validate({*spec, degrees, seq_len, apply_orders}); });
}

}  // namespace

TEST_CASE("context_parallel plugin: context_parallel_degree 2, all-gather rotation, head-tail balancing and ring "
          "attention by default; each option documented") {
  titan::PluginContext context = titan::test::plugin_context("");
  auto cp = titan::PluginRegistry::instance().create_parallelizer("context_parallel", context);
  titan::test::check_documented(context.options, {"context_parallel_degree", "context_parallel_rotate_method",
                                                  "context_parallel_load_balancer", "context_parallel_method"});
  titan::ConfigNode resolved = titan::test::resolved(context.options);
  CHECK(resolved.get<int64_t>("context_parallel_degree", 0) == 2);
  CHECK(resolved.get<std::string>("context_parallel_rotate_method", "") == "allgather");
  CHECK(resolved.get<std::string>("context_parallel_load_balancer", "") == "headtail");
  CHECK(resolved.get<std::string>("context_parallel_method", "") == "ring");

  CHECK((cp->apply_order() == ApplyOrder::context_parallel));
  auto dims = cp->mesh_dims();
  REQUIRE(dims.size() == 1);
  CHECK(dims[0].dim == "cp");
  CHECK(dims[0].degree == 2);
  CHECK(create_parallelizer("context_parallel", "{context_parallel_degree: -1}")->mesh_dims()[0].degree == -1);
}

TEST_CASE("context_parallel plugin: context parallelism refuses pipeline_parallel_degree > 1 for now") {
  std::string cp = validate_cp("{}", {{"cp", 2}, {"pp", 2}}, 128, {});
  CHECK(has(cp, "context_parallel: context_parallel_degree = 2 with pipeline_parallel_degree = 2 is not "
                "supported yet"));
  CHECK(has(validate_cp("{}", {{"cp", 2}, {"pp", 2}}), "use one or the other"));
}

TEST_CASE("context_parallel plugin: cp > 1 needs a data-parallel plugin in the run to average over the sequence "
          "pieces") {
  std::string alone = validate_cp("{}", {{"cp", 2}}, 128, {ApplyOrder::context_parallel});
  CHECK(has(alone, "mesh dim cp=2 needs a data-parallel plugin"));
  CHECK(has(alone, "add {name: fsdp} to plugins"));
  CHECK(has(validate_cp("{}", {{"cp", 2}, {"tp", 2}}, 128, {ApplyOrder::tensor_parallel, ApplyOrder::context_parallel}),
            "mesh dim cp=2 needs a data-parallel plugin"));
  CHECK(validate_cp("{}", {{"cp", 2}}, 128, {ApplyOrder::data_parallel}) == "<no error>");
  // Nothing to average while cp is 1 or not known yet (-1 without --world-size).
  CHECK(validate_cp("{}", {{"cp", 1}}, 128, {}) == "<no error>");
  CHECK(validate_cp("{}", {}, 128, {}) == "<no error>");
}

TEST_CASE("context_parallel plugin: validate() refuses a sequence or a head count the degree does not split, "
          "naming what would work") {
  CHECK(validate_cp("{}", {{"cp", 2}}, 66) ==
        "context_parallel: training.seq_len = 66 is not divisible by 2 x context_parallel_degree 2 (head-tail "
        "chunks) = 4; use a multiple of 4");
  CHECK(validate_cp("{context_parallel_load_balancer: none}", {{"cp", 2}}, 66) == "<no error>");
  CHECK(has(validate_cp("{}", {{"cp", 2}, {"tp", 2}}, 68),
            "x tensor_parallel_degree 2 (sequence parallelism) = 8; use a multiple of 8"));
  // Ulysses gives each cp rank whole heads: 16 heads do not split over 3.
  CHECK(validate_cp("{context_parallel_method: ulysses}", {{"cp", 3}}, 96) ==
        "context_parallel: Ulysses splits attention heads over context_parallel_degree 3, but model.n_heads = 16 "
        "does not divide; use context_parallel_method: ring or a degree that divides the heads");
  CHECK(validate_cp("{context_parallel_method: ulysses}", {{"cp", 4}}, 96) == "<no error>");
  CHECK(validate_cp("{}", {{"cp", 3}}, 96) == "<no error>");  // ring attention keeps every head
}

TEST_CASE("context_parallel plugin: bad options are refused naming the key and what was expected") {
  auto refusal = [](const std::string& options) {
    return error_of([&] { create_parallelizer("context_parallel", options); });
  };
  std::string zero = refusal("{context_parallel_degree: 0}");
  CHECK(has(zero, "run.yaml:1:"));
  CHECK(has(zero, "context_parallel_degree: expected a degree >= 1 or -1 (-1: the rest of the world), got 0"));
  CHECK(has(refusal("{context_parallel_load_balancer: zigzag}"),
            "context_parallel_load_balancer: expected one of {headtail, none}, got \"zigzag\""));
  CHECK(has(refusal("{context_parallel_rotate_method: ring}"),
            "context_parallel_rotate_method: expected one of {allgather, alltoall}, got \"ring\""));
  CHECK(has(refusal("{context_parallel_method: star}"),
            "context_parallel_method: expected one of {ring, ulysses}, got \"star\""));
}
