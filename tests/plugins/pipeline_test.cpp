// The `pipeline` plugin (plugins/pipeline) through the registry: how it
// splits the llama3 debug model (6 blocks) into stages by TorchTitan's rule
// and by a user's list, and the refusals that name the option and what
// would work. (Tensor and context parallelism's refusal of pp > 1 is tested
// with their plugins: tensor_parallel_test.cpp, context_parallel_test.cpp.)
#include "plugin_support.hpp"

#include "titan/pipeline.hpp"

namespace {

using Stages = std::vector<std::vector<std::string>>;
using titan::test::create_pipeline_splitter;
using titan::test::debugmodel;
using titan::test::error_of;
using titan::test::has;

// The pipeline plugin with `options_yaml`, as the PipelineSplitter core sees.
struct Splitter {
  explicit Splitter(const std::string& options_yaml) : splitter(create_pipeline_splitter("pipeline", options_yaml)) {
    REQUIRE(splitter != nullptr);
  }
  Stages stages(int64_t default_stages) const { return splitter->stage_modules(*debugmodel(), default_stages); }
  std::unique_ptr<titan::PipelineSplitter> splitter;
};

}  // namespace

TEST_SUITE("pipeline") {
  TEST_CASE("pipeline: a pipeline_splitter (no parallelizer) asking for the pp mesh dim, its settings as read") {
    Splitter defaults("");
    CHECK(titan::PluginRegistry::instance().load("pipeline").kinds == titan::kind_pipeline_splitter);
    auto dims = defaults.splitter->mesh_dims();
    REQUIRE(dims.size() == 1);
    CHECK(dims[0].dim == "pp");
    CHECK(dims[0].degree == -1);
    const titan::PipelineSettings& d = defaults.splitter->settings();
    CHECK(d.degree == -1);
    CHECK(d.schedule == "1F1B");
    CHECK(d.schedule_csv.empty());
    CHECK(d.microbatch_size == 1);
    CHECK(d.microbatches == 0);
    CHECK(d.trace.empty());

    Splitter set(
        "{pipeline_parallel_degree: 4, pipeline_parallel_schedule: interleaved1f1b, "
        "pipeline_parallel_schedule_csv: lists.csv, num_pp_microbatches: 8, pipeline_parallel_trace: out/pp}");
    const titan::PipelineSettings& s = set.splitter->settings();
    CHECK(set.splitter->mesh_dims()[0].degree == 4);
    CHECK(s.degree == 4);
    CHECK(s.schedule == "interleaved1f1b");  // core resolves names, case-insensitive
    CHECK(s.schedule_csv == "lists.csv");
    CHECK(s.microbatches == 8);
    CHECK(s.trace == "out/pp");
    CHECK(Splitter("{pipeline_parallel_microbatch_size: 2}").splitter->settings().microbatch_size == 2);
  }

  TEST_CASE("pipeline: the debug model on 2 stages: the embedding and 3 blocks, then 3 blocks, the norm and output") {
    CHECK(Splitter("").stages(2) == Stages{{"tok_embeddings", "layers.0", "layers.1", "layers.2"},
                                           {"layers.3", "layers.4", "layers.5", "norm", "output"}});
  }

  TEST_CASE("pipeline: the debug model on 4 stages (pp 2 x Interleaved1F1B's 2 per rank), as the README shows") {
    const Stages four{{"tok_embeddings", "layers.0"},
                      {"layers.1", "layers.2"},
                      {"layers.3", "layers.4"},
                      {"layers.5", "norm", "output"}};
    CHECK(Splitter("").stages(4) == four);
    // One stage holds everything; 8 stages of one unit leave the ends with no block.
    CHECK(Splitter("").stages(1) == Stages{{"tok_embeddings", "layers.0", "layers.1", "layers.2", "layers.3",
                                            "layers.4", "layers.5", "norm", "output"}});
    CHECK(Splitter("").stages(8) == Stages{{"tok_embeddings"},
                                           {"layers.0"},
                                           {"layers.1"},
                                           {"layers.2"},
                                           {"layers.3"},
                                           {"layers.4"},
                                           {"layers.5"},
                                           {"norm", "output"}});
  }

  TEST_CASE("pipeline: pipeline_parallel_layers_per_stage sets the stage count from 6 blocks + 1 + 1 layer units") {
    // 8 units / 2 = 4 stages, whatever the schedule would have asked for.
    CHECK(Splitter("{pipeline_parallel_layers_per_stage: 2}").stages(2) == Splitter("").stages(4));
    // 8 units / 3 -> 3 stages of 3, 3, 2 units: the first stages take the remainder.
    CHECK(Splitter("{pipeline_parallel_layers_per_stage: 3}").stages(2) ==
          Stages{{"tok_embeddings", "layers.0", "layers.1"},
                 {"layers.2", "layers.3", "layers.4"},
                 {"layers.5", "norm", "output"}});
    // No weight for the ends: 6 units / 2 -> 3 stages of 2 blocks.
    CHECK(Splitter("{pipeline_parallel_layers_per_stage: 2, pipeline_parallel_first_stage_less_layers: 0, "
                   "pipeline_parallel_last_stage_less_layers: 0}")
              .stages(2) == Stages{{"tok_embeddings", "layers.0", "layers.1"},
                                   {"layers.2", "layers.3"},
                                   {"layers.4", "layers.5", "norm", "output"}});
  }

  TEST_CASE("pipeline: module_fqns_per_model_part is used as given, one string of paths per stage") {
    Splitter given(
        "{module_fqns_per_model_part: [\"tok_embeddings layers.0 layers.1\", \"layers.2, layers.3\", "
        "\"layers.4 layers.5 norm output\"]}");
    const Stages expected{{"tok_embeddings", "layers.0", "layers.1"},
                          {"layers.2", "layers.3"},
                          {"layers.4", "layers.5", "norm", "output"}};
    CHECK(given.stages(2) == expected);  // the count comes from the list, not from core
    CHECK(given.stages(8) == expected);
    // "layers" stands for every block.
    CHECK(Splitter("{module_fqns_per_model_part: [tok_embeddings, layers, \"norm output\"]}").stages(2) ==
          Stages{{"tok_embeddings"}, {"layers"}, {"norm", "output"}});
    // TorchTitan's list of lists gives the same stages.
    CHECK(Splitter("{module_fqns_per_model_part: [[tok_embeddings], [layers], [norm, output]]}").stages(2) ==
          Splitter("{module_fqns_per_model_part: [tok_embeddings, layers, \"norm output\"]}").stages(2));
  }

  TEST_CASE("pipeline: a split that leaves a stage with no block or fewer than none is refused naming the options") {
    // 16 stages over 8 units: stage 8 would hold nothing.
    std::string too_many = error_of([] { Splitter("").stages(16); });
    CHECK(has(too_many, "6 blocks + pipeline_parallel_first_stage_less_layers 1 + "
                        "pipeline_parallel_last_stage_less_layers 1 = 8 layer units over 16 stages"));
    CHECK(has(too_many, "pipeline_parallel_degree x the stages per rank"));
    CHECK(has(too_many, "stage 8 with no block"));
    CHECK(has(too_many, "8 stages"));

    // The first stage's 3 units less 4 for the embedding.
    std::string first = error_of([] { Splitter("{pipeline_parallel_first_stage_less_layers: 4}").stages(4); });
    CHECK(has(first, "pipeline_parallel_first_stage_less_layers 4"));
    CHECK(has(first, "stage 0 with -1 blocks (its units less pipeline_parallel_first_stage_less_layers)"));
    CHECK(has(first, "3 stages"));
    CHECK(has(first, "pipeline_parallel_first_stage_less_layers 3 would work"));

    std::string last = error_of([] { Splitter("{pipeline_parallel_last_stage_less_layers: 3}").stages(4); });
    CHECK(has(last, "stage 3 with -1 blocks (its units less pipeline_parallel_last_stage_less_layers)"));
    CHECK(has(last, "pipeline_parallel_last_stage_less_layers 2 would work"));

    // One unit per stage cannot carry an embedding that weighs 3.
    std::string per_stage = error_of([] {
      Splitter("{pipeline_parallel_layers_per_stage: 1, pipeline_parallel_first_stage_less_layers: 3}").stages(2);
    });
    CHECK(has(per_stage, "over 10 stages (pipeline_parallel_layers_per_stage 1)"));
    CHECK(has(per_stage, "stage 0 with -2 blocks"));
    CHECK(has(per_stage, "pipeline_parallel_layers_per_stage 3"));
    CHECK(has(per_stage, "pipeline_parallel_first_stage_less_layers 1 would work"));

    CHECK(has(error_of([] { Splitter("").stages(0); }), "0 pipeline stages asked for"));
  }

  TEST_CASE("pipeline: module_fqns_per_model_part must name whole modules of the model, each once, in order") {
    auto refusal = [](const std::string& parts) {
      return error_of([&] { Splitter("{module_fqns_per_model_part: " + parts + "}").stages(2); });
    };
    std::string missing = refusal("[\"tok_embeddings layers.0 layers.1 layers.2\", \"layers.3 layers.4 layer.5 norm "
                                  "output\"]");
    CHECK(has(missing, "module_fqns_per_model_part[1]: the model has no module 'layer.5'; did you mean 'layers.5'?"));
    CHECK(has(missing, "tok_embeddings, layers.0 .. layers.5, norm, output"));
    CHECK(has(refusal("[\"tok_embeddings layers.0 layers.1 layers.2\", \"layers.2 layers.3 layers.4 layers.5 norm "
                      "output\"]"),
              "module_fqns_per_model_part[1]: 'layers.2' is also in module_fqns_per_model_part[0]"));
    CHECK(has(refusal("[\"tok_embeddings layers.0 layers.1\", \"layers.3 layers.4 layers.5 norm output\"]"),
              "'layers.2' is in no part"));
    CHECK(has(refusal("[\"tok_embeddings layers.0 layers.3\", \"layers.1 layers.2 layers.4 layers.5 norm output\"]"),
              "'layers.3' (part 0) comes after 'layers.2' (part 1)"));
    CHECK(has(refusal("[\"tok_embeddings layers\", \"layers.0.attention norm output\"]"),
              "'layers.0.attention' is a part of 'layers.0'; a stage holds whole blocks and top-level modules"));
    CHECK(has(refusal("[\"tok_embeddings layers\", \"\", \"norm output\"]"), "module_fqns_per_model_part[1] is empty"));
  }

  TEST_CASE("pipeline: options that contradict each other are refused at the plugin entry, naming the keys") {
    auto refusal = [](const std::string& options) {
      return error_of([&] { create_pipeline_splitter("pipeline", options); });
    };
    std::string both = refusal("{pipeline_parallel_microbatch_size: 2, num_pp_microbatches: 4}");
    CHECK(has(both, "run.yaml:1:"));
    CHECK(has(both, "set either pipeline_parallel_microbatch_size (2) or num_pp_microbatches (4), not both"));
    CHECK(has(refusal("{module_fqns_per_model_part: [tok_embeddings, \"layers norm output\"], "
                      "pipeline_parallel_layers_per_stage: 2}"),
              "remove it or pipeline_parallel_layers_per_stage (2)"));
    CHECK(has(refusal("{module_fqns_per_model_part: [tok_embeddings, \"layers norm output\"], "
                      "pipeline_parallel_first_stage_less_layers: 0}"),
              "would be ignored"));
    CHECK(has(refusal("{module_fqns_per_model_part: [[tok_embeddings], 3]}"),
              "module_fqns_per_model_part: expected a list of lists of module paths"));
    CHECK(has(refusal("{pipeline_parallel_degree: 0}"), "pipeline_parallel_degree: expected a degree >= 1 or -1"));
    CHECK(has(refusal("{pipeline_parallel_microbatch_size: 0}"), "pipeline_parallel_microbatch_size"));
    CHECK(has(refusal("{num_pp_microbatches: -1}"), "num_pp_microbatches"));
    CHECK(has(refusal("{pipeline_parallel_layers_per_stage: -2}"), "pipeline_parallel_layers_per_stage"));
    CHECK(has(refusal("{pipeline_parallel_last_stage_less_layers: -1}"), "pipeline_parallel_last_stage_less_layers"));
  }

  TEST_CASE("pipeline: validate() checks the split it can know without the schedule") {
    auto spec = debugmodel();
    auto validate = [&](const std::string& options, std::map<std::string, int64_t> degrees) {
      return error_of([&] { create_pipeline_splitter("pipeline", options)->validate({*spec, degrees, 128, {}}); });
    };
    CHECK(validate("", {{"pp", 2}}) == "<no error>");
    CHECK(validate("", {}) == "<no error>");  // pp -1 without --world-size: nothing to check yet
    CHECK(has(validate("", {{"pp", 16}}), "stage 8 with no block"));
    // A split fixed by the options is checked even while the degree is unknown.
    CHECK(has(validate("{module_fqns_per_model_part: [tok_embeddings, \"layers nor output\"]}", {}),
              "no module 'nor'"));
    CHECK(has(validate("{pipeline_parallel_layers_per_stage: 1, pipeline_parallel_first_stage_less_layers: 3}", {}),
              "stage 0 with -2 blocks"));
  }
}
