// The `ddp` plugin (plugins/ddp) through the registry, in process: its
// options with their defaults (PyTorch DDP's 25 MB buckets), the mesh dim it
// asks for, and bad options refused naming the key and what was expected.
// Training on real ranks: integration/data_parallel_test.cpp.
#include "plugin_support.hpp"

namespace {

using titan::test::create_parallelizer;
using titan::test::error_of;
using titan::test::parallelizer_refusal;
using titan::test::has;

}  // namespace

TEST_CASE("ddp plugin: dp_replicate -1 and bucket_cap_mb 25 unless set; each option documented") {
  titan::PluginContext context = titan::test::plugin_context("");
  auto ddp = titan::PluginRegistry::instance().create_parallelizer("ddp", context);
  titan::test::check_documented(context.options, {"dp_replicate", "bucket_cap_mb"});
  titan::ConfigNode resolved = titan::test::resolved(context.options);
  CHECK(resolved.get<int64_t>("dp_replicate", 0) == -1);
  CHECK(resolved.get<double>("bucket_cap_mb", 0) == 25);

  CHECK((ddp->apply_order() == titan::ApplyOrder::data_parallel));
  CHECK_FALSE(ddp->allows_split_backward());  // its buckets fill as gradients accumulate
  auto dims = ddp->mesh_dims();
  REQUIRE(dims.size() == 1);
  CHECK(dims[0].dim == "dp_replicate");
  CHECK(dims[0].degree == -1);
  auto four = create_parallelizer("ddp", "{dp_replicate: 4, bucket_cap_mb: 0.5}")->mesh_dims();
  REQUIRE(four.size() == 1);
  CHECK(four[0].degree == 4);
}

TEST_CASE("ddp plugin: bad options are refused naming the key and what was expected") {
  std::string zero = parallelizer_refusal("ddp", "{bucket_cap_mb: 0}");
  CHECK(has(zero, "run.yaml:1:"));
  CHECK(has(zero, "bucket_cap_mb: expected a finite number > 0, got 0"));
  CHECK(has(parallelizer_refusal("ddp", "{bucket_cap_mb: -25}"), "bucket_cap_mb: expected a finite number > 0, got -25"));
  CHECK(has(parallelizer_refusal("ddp", "{bucket_cap_mb: .inf}"), "bucket_cap_mb: expected a finite number > 0, got inf"));
  CHECK(has(parallelizer_refusal("ddp", "{bucket_cap_mb: large}"), "bucket_cap_mb: expected float, got \"large\""));
  CHECK(has(parallelizer_refusal("ddp", "{dp_replicate: 0}"),
            "dp_replicate: expected a degree >= 1 or -1 (-1: the rest of the world), got 0"));
  titan::PluginContext typo = titan::test::plugin_context("{bucket_cap: 10}");
  titan::PluginRegistry::instance().create_parallelizer("ddp", typo);
  CHECK(has(error_of([&] { typo.options.check_unknown_keys(); }),
            "bucket_cap: unknown key; did you mean 'bucket_cap_mb'?"));
}
