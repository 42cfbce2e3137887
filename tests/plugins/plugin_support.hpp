// Helpers of the tests that create plugins in process through the registry
// (tests/plugins): a parallelizer from YAML options, the llama3 debug
// model's spec, a refusal's message (error_of.hpp), and the options a factory read as
// `titan plugins inspect` lists them.
#pragma once
#include "doctest_torch.hpp"

#include <memory>
#include <string>
#include <vector>

#include "error_of.hpp"
#include "test_support.hpp"
#include "titan/config.hpp"
#include "titan/error.hpp"
#include "titan/model.hpp"
#include "titan/parallelizer.hpp"
#include "titan/pipeline.hpp"
#include "titan/plugin.hpp"
#include "titan/registry.hpp"

namespace titan::test {

// What a factory gets: `options_yaml` ("" for none) parsed as the file run.yaml.
inline PluginContext plugin_context(const std::string& options_yaml) {
  PluginContext context;
  context.options = ConfigNode::parse(options_yaml.empty() ? "{}" : options_yaml, "run.yaml");
  return context;
}

inline std::unique_ptr<Parallelizer> create_parallelizer(const std::string& name, const std::string& options_yaml) {
  return PluginRegistry::instance().create_parallelizer(name, plugin_context(options_yaml));
}

inline std::unique_ptr<PipelineSplitter> create_pipeline_splitter(const std::string& name,
                                                                  const std::string& options_yaml) {
  return PluginRegistry::instance().create_pipeline_splitter(name, plugin_context(options_yaml));
}

// The llama3 plugin's debugmodel flavor: 6 blocks, dim 256, 16 heads and 16
// key/value heads, FFN hidden size 768, vocabulary 2048.
inline std::unique_ptr<ModelSpec> debugmodel() {
  PluginContext context;
  context.options = ConfigNode::parse("model:\n  flavor: debugmodel\n", "run.yaml").child("model");
  return PluginRegistry::instance().create_model("llama3", context);
}

// What the parallelizer plugin `name` says when its factory refuses `options_yaml`.
inline std::string parallelizer_refusal(const std::string& name, const std::string& options_yaml) {
  return error_of([&] { create_parallelizer(name, options_yaml); });
}

// Checks that a factory read exactly `keys` from `options`, in this order,
// each with a default and a line of doc (what `titan plugins inspect`
// prints), and that nothing in `options` went unread.
inline void check_documented(const ConfigNode& options, const std::vector<std::string>& keys) {
  std::vector<std::string> read;
  for (const auto& doc : options.documented()) {
    CAPTURE(doc.key);
    CHECK(!doc.fallback.empty());
    CHECK(!doc.doc.empty());
    read.push_back(doc.key);
  }
  CHECK(read == keys);
  CHECK_NOTHROW(options.check_unknown_keys());
}

// The options as the factory left them, read back from their YAML: every
// option it read is there, its default written in where the YAML had none
// (the resolved config a run saves).
inline ConfigNode resolved(const ConfigNode& options) { return ConfigNode::parse(options.dump(), "resolved.yaml"); }

}  // namespace titan::test
