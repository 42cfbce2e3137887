// A pipeline split with one plausible slip, which titan-conformance's
// split checks must name: it deals the top-level modules and blocks over the
// stages evenly but forgets the last block, so no stage holds it
// (pipeline_splitter.split_covers and .split_cuts fail; count, order and the
// rest pass).
#include <torch/nn/module.h>

#include "titan/model.hpp"
#include "titan/pipeline.hpp"
#include "test_plugin.hpp"

namespace {

class ForgetfulSplit : public titan::PipelineSplitter {
 public:
  std::vector<titan::MeshDimRequest> mesh_dims() const override { return {{"pp", -1}}; }
  const titan::PipelineSettings& settings() const override { return settings_; }
  std::vector<std::vector<std::string>> stage_modules(const titan::ModelSpec& spec,
                                                      int64_t default_stages) const override {
    std::shared_ptr<titan::CausalLM> model = spec.build(c10::Device(c10::kMeta));
    std::vector<std::string> units;
    for (const auto& child : model->named_children()) {
      if (child.key() != "layers") {
        units.push_back(child.key());
        continue;
      }
      auto blocks = child.value()->named_children();
      for (size_t b = 0; b + 1 < blocks.size(); ++b) units.push_back("layers." + blocks[b].key());  // the slip
    }
    std::vector<std::vector<std::string>> stages(static_cast<size_t>(default_stages));
    const size_t n = units.size(), s_count = stages.size();
    for (size_t u = 0; u < n; ++u) stages[u * s_count / n].push_back(units[u]);
    return stages;
  }

 private:
  titan::PipelineSettings settings_;
};

}  // namespace

TITAN_TEST_PLUGIN_OF(forgetful_split, pipeline_splitter, ForgetfulSplit, "1.0",
                "a pipeline split that forgets the last block, for the conformance tests")
