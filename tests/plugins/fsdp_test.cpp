// The `fsdp` plugin (plugins/fsdp) through the registry, in process: its
// options with FSDP2's defaults, the mesh dims it asks for (HSDP when
// dp_replicate > 1), and bad options refused naming the key and what was
// expected. Training on real ranks: integration/data_parallel_test.cpp
// (and the FSDP layouts of the other *_e2e_test.cpp files).
#include "plugin_support.hpp"

#include <algorithm>

namespace {

using titan::test::create_parallelizer;
using titan::test::error_of;
using titan::test::parallelizer_refusal;
using titan::test::has;

}  // namespace

TEST_CASE("fsdp plugin: dp_shard -1, dp_replicate 1, reshard_after_forward default and prefetch on unless set; "
          "each option documented") {
  titan::PluginContext context = titan::test::plugin_context("");
  auto fsdp = titan::PluginRegistry::instance().create_parallelizer("fsdp", context);
  titan::test::check_documented(context.options, {"dp_shard", "dp_replicate", "reshard_after_forward", "prefetch"});
  titan::ConfigNode resolved = titan::test::resolved(context.options);
  CHECK(resolved.get<int64_t>("dp_shard", 0) == -1);
  CHECK(resolved.get<int64_t>("dp_replicate", 0) == 1);
  CHECK(resolved.get<std::string>("reshard_after_forward", "") == "default");
  CHECK(resolved.get<bool>("prefetch", false));
  // Its doc lists every name users may write.
  const auto& docs = context.options.documented();
  auto reshard = std::find_if(docs.begin(), docs.end(),
                              [](const titan::OptionDoc& doc) { return doc.key == "reshard_after_forward"; });
  REQUIRE(reshard != docs.end());
  CHECK(has(reshard->doc, "{default, always, never, true, false}"));

  CHECK((fsdp->apply_order() == titan::ApplyOrder::data_parallel));
  CHECK_FALSE(fsdp->allows_split_backward());  // it reduce-scatters in each block's backward
  auto dims = fsdp->mesh_dims();
  REQUIRE(dims.size() == 1);  // no dp_replicate dim while it is 1
  CHECK(dims[0].dim == "dp_shard");
  CHECK(dims[0].degree == -1);
}

TEST_CASE("fsdp plugin: dp_replicate > 1 asks for HSDP's two mesh dims; always, never, true and false are "
          "accepted") {
  auto hsdp = create_parallelizer("fsdp", "{dp_shard: 2, dp_replicate: 4}")->mesh_dims();
  REQUIRE(hsdp.size() == 2);
  CHECK(hsdp[0].dim == "dp_shard");
  CHECK(hsdp[0].degree == 2);
  CHECK(hsdp[1].dim == "dp_replicate");
  CHECK(hsdp[1].degree == 4);
  for (const char* value : {"default", "always", "never", "true", "false"}) {
    CAPTURE(value);
    CHECK(parallelizer_refusal("fsdp", std::string("{reshard_after_forward: ") + value + "}") == "<no error>");
  }
}

TEST_CASE("fsdp plugin: bad options are refused naming the key and what was expected") {
  std::string zero = parallelizer_refusal("fsdp", "{dp_shard: 0}");
  CHECK(has(zero, "run.yaml:1:"));
  CHECK(has(zero, "dp_shard: expected a degree >= 1 or -1 (-1: the rest of the world), got 0"));
  CHECK(has(parallelizer_refusal("fsdp", "{dp_shard: -2}"), "dp_shard: expected a degree >= 1 or -1 (-1: the rest of the world), got -2"));
  CHECK(has(parallelizer_refusal("fsdp", "{dp_shard: two}"), "dp_shard: expected int, got \"two\""));
  // Replicas cannot take "the rest of the world": dp_shard does.
  CHECK(has(parallelizer_refusal("fsdp", "{dp_replicate: 0}"), "dp_replicate: expected a degree >= 1, got 0"));
  CHECK(has(parallelizer_refusal("fsdp", "{dp_replicate: -1}"), "dp_replicate: expected a degree >= 1, got -1"));
  CHECK(has(parallelizer_refusal("fsdp", "{reshard_after_forward: sometimes}"),
            "reshard_after_forward: expected one of {default, always, never, true, false}, got \"sometimes\""));
  // A misspelt key is caught once every option has been read.
  titan::PluginContext typo = titan::test::plugin_context("{dp_shrad: 2}");
  titan::PluginRegistry::instance().create_parallelizer("fsdp", typo);
  CHECK(has(error_of([&] { typo.options.check_unknown_keys(); }), "dp_shrad: unknown key; did you mean 'dp_shard'?"));
}
