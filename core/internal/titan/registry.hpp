// The plugin registry: finds plugin libraries on the search path, checks
// their descriptor (ABI, LibTorch version) and creates objects from their
// factories. Libraries stay loaded for the life of the process, so no
// plugin object can outlive its code.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "titan/plugin.hpp"

namespace titan {

struct PluginInfo {
  std::string name;
  std::string version;
  std::string torch_version;
  uint32_t kinds = 0;
  std::string summary;
  std::string path;
  std::vector<std::string> pipeline_schedules;  // names it registered (kind_pipeline_schedule)
};

class PluginRegistry {
 public:
  // The process-wide registry (never destroyed).
  static PluginRegistry& instance();

  // Search order: dirs added here (YAML plugin_path), TITAN_PLUGIN_PATH,
  // the build tree, the install prefix.
  void add_search_dir(const std::string& dir);
  std::vector<std::string> search_dirs() const;

  // The plugin a config section gets when it names none ("model" ->
  // "llama3"; "pipeline_schedule": whose schedules TorchTitan's names are),
  // as the build chose (TITAN_DEFAULT_PLUGINS in CMakeLists.txt); "" if none.
  static std::string default_plugin(const std::string& section);

  // Names of the plugin files found on the search path (not loaded).
  std::vector<std::string> available() const;
  // Loads by name (or by a path to a .so); idempotent.
  const PluginInfo& load(const std::string& name_or_path);
  std::vector<PluginInfo> loaded() const;

  // Creates an object of one kind from a loaded plugin. Errors name the
  // plugin; config errors from the factory pass through unchanged. One per
  // kind of plugin.hpp's list: create_model(name, context) returns a
  // unique_ptr<ModelSpec>, create_parallelizer a unique_ptr<Parallelizer>, ...
#define TITAN_REGISTRY_CREATE(kind, Interface, bit) \
  std::unique_ptr<Interface> create_##kind(const std::string& name, const PluginContext& context);
  TITAN_SINGLE_FACTORY_KINDS(TITAN_REGISTRY_CREATE)
#undef TITAN_REGISTRY_CREATE
  // By schedule name (case-insensitive, as TorchTitan's pipeline_parallel_schedule), from any
  // loaded plugin; default_plugin("pipeline_schedule") is loaded when no loaded plugin has it.
  std::unique_ptr<PipelineSchedule> create_pipeline_schedule(const std::string& name, const PluginContext& context);
  // Names of the pipeline schedules the loaded plugins provide.
  std::vector<std::string> pipeline_schedules() const;
  // Plugin `name`'s entry of the `plugins:` list for a layout titan plan
  // chose (plan_entry.hpp); loads it; an Error when it registered none.
  std::string plan_entry(const std::string& name, const PlannedLayout& layout);

  struct Impl;

 private:
  PluginRegistry();
  std::unique_ptr<Impl> impl_;
};

}  // namespace titan
