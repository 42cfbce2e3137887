// Fuzz target: a run's YAML config and its `--set` overrides, read as
// `titan train` reads them (ConfigNode::parse, apply_override, the core
// sections, the plugin list, the unknown-key check, the resolved dump).
// Input: the YAML text, then optional NUL-separated `key.path=value` strings.
#include <cstdint>

#include "fuzz_support.hpp"
#include "titan/config.hpp"
#include "titan/job_config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto [yaml, overrides] = titan::fuzz::split_at_nul(titan::fuzz::as_text(data, size));
  titan::fuzz::expect_clean_refusal([&, yaml = yaml, overrides = overrides]() mutable {
    titan::ConfigNode root = titan::ConfigNode::parse(std::string(yaml), "fuzz.yaml");
    while (!overrides.empty()) {
      auto [assignment, rest] = titan::fuzz::split_at_nul(overrides);
      root.apply_override(std::string(assignment));
      overrides = rest;
    }
    titan::read_core_config(root);
    // What the trainer does with the plugin list before handing each entry
    // to its plugin: read the name; the plugin reads (and checks) the rest.
    for (const auto& plugin : root.children("plugins")) {
      plugin.get<std::string>("name", "");
      for (const auto& key : plugin.keys()) {
        if (key != "name") plugin.mark_used(key);
      }
    }
    for (const char* section : {"model", "optimizer", "lr_scheduler", "checkpoint", "parallelism", "float8"}) {
      root.mark_used(section);
    }
    root.keys();
    root.check_unknown_keys();
    root.dump();
  });
  return 0;
}
