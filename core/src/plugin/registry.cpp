// Plugin discovery and loading on Boost.DLL. The descriptor is checked
// (ABI first, then LibTorch version) before any plugin code runs beyond the
// one exported function.
#include "titan/registry.hpp"

#include <boost/dll/shared_library.hpp>
#include <c10/util/StringUtil.h>
#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <tuple>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <sstream>

#include "titan/plugin_interfaces.hpp"

namespace titan {
namespace build_info {
const char* plugin_build_dir();
const char* plugin_install_dir();
const char* plugin_dir_from_libdir();
const std::map<std::string, std::string>& default_plugins();
}  // namespace build_info

namespace fs = std::filesystem;

namespace {

constexpr const char* kFilePrefix = "libtitan_plugin_";
constexpr const char* kFileSuffix = ".so";

std::string plugin_name_of(const fs::path& file) {
  std::string stem = file.filename().string();
  std::string prefix = kFilePrefix;
  if (stem.rfind(prefix, 0) != 0 || file.extension() != kFileSuffix) return "";
  return stem.substr(prefix.size(), stem.size() - prefix.size() - std::string(kFileSuffix).size());
}

std::string major_minor(const std::string& version) {
  auto first = version.find('.');
  auto second = version.find('.', first == std::string::npos ? 0 : first + 1);
  return version.substr(0, second);
}

// The installed plugins relative to the libtitan_core this process runs, so
// an SDK installed with `cmake --install --prefix P` (or moved) finds its
// own plugins rather than those of the prefix it was configured with.
std::string plugins_next_to_core() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&build_info::plugin_dir_from_libdir), &info) == 0 || !info.dli_fname) {
    return "";
  }
  std::error_code error;
  fs::path core = fs::canonical(info.dli_fname, error);
  return error ? "" : (core.parent_path() / build_info::plugin_dir_from_libdir()).string();
}

}  // namespace

std::string kinds_to_string(uint32_t kinds) {
  static const std::pair<uint32_t, const char*> names[] = {
#define TITAN_KIND_NAME(kind, Interface, bit) {kind_##kind, #kind},
      TITAN_SINGLE_FACTORY_KINDS(TITAN_KIND_NAME)
#undef TITAN_KIND_NAME
      {kind_pipeline_schedule, "pipeline_schedule"}};
  std::vector<std::string> out;
  for (const auto& [bit, name] : names) {
    if (kinds & bit) out.push_back(name);
  }
  return c10::Join(", ", out);
}

struct PluginRegistry::Impl : PluginRegistrar {
  struct Loaded {
    PluginInfo info;
    boost::dll::shared_library library;
#define TITAN_FACTORY_SLOT(kind, Interface, bit) Factory<Interface> kind##_factory;
    TITAN_SINGLE_FACTORY_KINDS(TITAN_FACTORY_SLOT)
#undef TITAN_FACTORY_SLOT
    std::vector<std::pair<std::string, Factory<PipelineSchedule>>> pipeline_schedules;  // as registered
    PlanEntry plan_entry;  // empty: the plugin writes nothing into titan plan's configs
  };

  std::mutex mutex;
  std::vector<std::string> extra_dirs;
  std::map<std::string, std::unique_ptr<Loaded>> plugins;  // by name
  Loaded* registering = nullptr;

#define TITAN_REGISTRAR_SLOT(kind, Interface, bit) \
  void kind(Factory<Interface> f) override { registering->kind##_factory = std::move(f); }
  TITAN_SINGLE_FACTORY_KINDS(TITAN_REGISTRAR_SLOT)
#undef TITAN_REGISTRAR_SLOT
  void pipeline_schedule(const std::string& name, Factory<PipelineSchedule> f) override {
    if (name.empty() || !f) throw Error("a pipeline schedule needs a name and a factory");
    for (const auto& [plugin_name, plugin] : plugins) {
      for (const auto& [other, factory] : plugin->pipeline_schedules) {
        if (lower(other) == lower(name)) {
          throw Error("pipeline schedule '" + name + "' is already provided by plugin '" + plugin_name +
                      "' (names are matched case-insensitively)");
        }
      }
    }
    for (const auto& [other, factory] : registering->pipeline_schedules) {
      if (lower(other) == lower(name)) throw Error("pipeline schedule '" + name + "' is registered twice");
    }
    registering->pipeline_schedules.emplace_back(name, std::move(f));
  }

  void plan_entry(PlanEntry entry) override { registering->plan_entry = std::move(entry); }

  static std::string lower(std::string text) {
    for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return text;
  }

  std::vector<std::string> dirs() const {
    std::vector<std::string> out = extra_dirs;
    if (const char* env = std::getenv("TITAN_PLUGIN_PATH")) {
      std::stringstream stream(env);
      for (std::string dir; std::getline(stream, dir, ':');) {
        if (!dir.empty()) out.push_back(dir);
      }
    }
    // An installed libtitan_core has its plugins beside it; the build
    // tree's has none there, so the build tree's folder comes next.
    for (const std::string& dir : {plugins_next_to_core(), std::string(build_info::plugin_build_dir()),
                                   std::string(build_info::plugin_install_dir())}) {
      if (!dir.empty() && std::find(out.begin(), out.end(), dir) == out.end()) out.push_back(dir);
    }
    return out;
  }

  std::map<std::string, std::string> discover() const {  // name -> first file found
    std::map<std::string, std::string> found;
    for (const auto& dir : dirs()) {
      std::error_code error;
      if (!fs::is_directory(dir, error)) continue;
      for (const auto& entry : fs::directory_iterator(dir, error)) {
        std::string name = plugin_name_of(entry.path());
        if (!name.empty() && !found.count(name)) found[name] = entry.path().string();
      }
    }
    return found;
  }

  Loaded& load_file(const std::string& path, const std::string& expected_name) {
    boost::dll::shared_library library;
    try {
      library.load(path, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_global);
    } catch (const std::exception& error) {
      throw Error("plugin file '" + path + "' cannot be loaded: " + error.what());
    }
    if (!library.has(TITAN_PLUGIN_ENTRY_NAME)) {
      throw Error("'" + path + "' is not a Titan plugin: it exports no '" + TITAN_PLUGIN_ENTRY_NAME +
                  "' (define one with TITAN_PLUGIN(...) in the plugin's sources)");
    }
    using Entry = const PluginDescriptor*();
    const PluginDescriptor* descriptor = library.get<Entry>(TITAN_PLUGIN_ENTRY_NAME)();
    if (descriptor == nullptr) throw Error("plugin '" + path + "' returned no descriptor");
    if (descriptor->abi_version != kPluginAbiVersion) {
      throw Error("plugin '" + path + "' was built for Titan plugin ABI " +
                  std::to_string(descriptor->abi_version) + ", but this titan uses ABI " +
                  std::to_string(kPluginAbiVersion) + "; rebuild the plugin against this Titan SDK");
    }
    std::string plugin_torch = descriptor->torch_version ? descriptor->torch_version : "?";
    if (major_minor(plugin_torch) != major_minor(torch_version_string())) {
      throw Error("plugin '" + std::string(descriptor->name) + "' (" + path + ") was built against LibTorch " +
                  plugin_torch + ", but titan runs LibTorch " + torch_version_string() +
                  "; rebuild the plugin against the same LibTorch");
    }
    std::string name = descriptor->name ? descriptor->name : "";
    if (!expected_name.empty() && name != expected_name) {
      throw Error("plugin file '" + path + "' declares the name '" + name + "', expected '" + expected_name +
                  "' (the file must be named libtitan_plugin_<name>.so)");
    }
    if (auto existing = plugins.find(name); existing != plugins.end()) return *existing->second;
    auto loaded = std::make_unique<Loaded>();
    loaded->info = {name,
                    descriptor->version ? descriptor->version : "",
                    plugin_torch,
                    descriptor->kinds,
                    descriptor->summary ? descriptor->summary : "",
                    path,
                    {}};
    loaded->library = std::move(library);
    registering = loaded.get();
    try {
      if (descriptor->register_factories) descriptor->register_factories(*this);
    } catch (const std::exception& error) {
      registering = nullptr;
      throw Error("plugin '" + name + "' failed while registering its factories: " + error.what());
    }
    registering = nullptr;
    if ((loaded->info.kinds & kind_pipeline_schedule) && loaded->pipeline_schedules.empty()) {
      throw Error("plugin '" + name + "' declares the pipeline_schedule kind but registered no schedule "
                  "(call registrar.pipeline_schedule(name, factory) for each)");
    }
    for (const auto& entry : loaded->pipeline_schedules) loaded->info.pipeline_schedules.push_back(entry.first);
    auto& slot = plugins[name];
    slot = std::move(loaded);
    return *slot;
  }

  Loaded& get(const std::string& name_or_path) {
    if (name_or_path.find('/') != std::string::npos || fs::path(name_or_path).extension() == ".so") {
      return load_file(name_or_path, "");
    }
    if (auto existing = plugins.find(name_or_path); existing != plugins.end()) return *existing->second;
    auto found = discover();
    auto file = found.find(name_or_path);
    if (file == found.end()) {
      std::vector<std::string> names;
      for (const auto& [name, path] : found) names.push_back(name);
      std::string hint = closest_match(name_or_path, names);
      throw Error("plugin '" + name_or_path + "' not found in [" + c10::Join(", ", dirs()) + "]" +
                  (hint.empty() ? "" : "; did you mean '" + hint + "'?") + " (known: " + c10::Join(", ", names) + ")");
    }
    return load_file(file->second, name_or_path);
  }

  template <class T>
  std::unique_ptr<T> create(const std::string& name, const PluginContext& context, Factory<T> Loaded::*slot,
                            PluginKind kind) {
    std::lock_guard<std::mutex> lock(mutex);
    Loaded& plugin = get(name);
    const Factory<T>& factory = plugin.*slot;
    if (!factory) {
      throw Error("plugin '" + plugin.info.name + "' provides no " + kinds_to_string(kind) +
                  " (it provides: " + kinds_to_string(plugin.info.kinds) + ")");
    }
    std::unique_ptr<T> object;
    try {
      object = factory(context);
    } catch (const ConfigError&) {
      throw;
    } catch (const std::exception& error) {
      throw Error("plugin '" + plugin.info.name + "' failed to create its " + kinds_to_string(kind) + ": " +
                  error.what());
    }
    if (!object) throw Error("plugin '" + plugin.info.name + "' returned no " + kinds_to_string(kind));
    return object;
  }
};

PluginRegistry::PluginRegistry() : impl_(std::make_unique<Impl>()) {}

PluginRegistry& PluginRegistry::instance() {
  // Deliberately leaked: plugin objects may be destroyed during static
  // destruction, and their code must still be mapped then.
  static PluginRegistry* registry = new PluginRegistry();
  return *registry;
}

void PluginRegistry::add_search_dir(const std::string& dir) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (std::find(impl_->extra_dirs.begin(), impl_->extra_dirs.end(), dir) == impl_->extra_dirs.end()) {
    impl_->extra_dirs.push_back(dir);
  }
}

std::vector<std::string> PluginRegistry::search_dirs() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->dirs();
}

std::string PluginRegistry::default_plugin(const std::string& section) {
  auto found = build_info::default_plugins().find(section);
  return found == build_info::default_plugins().end() ? "" : found->second;
}

std::vector<std::string> PluginRegistry::available() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  std::vector<std::string> names;
  for (const auto& [name, path] : impl_->discover()) names.push_back(name);
  return names;
}

const PluginInfo& PluginRegistry::load(const std::string& name_or_path) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->get(name_or_path).info;
}

std::vector<PluginInfo> PluginRegistry::loaded() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  std::vector<PluginInfo> out;
  for (const auto& [name, plugin] : impl_->plugins) out.push_back(plugin->info);
  return out;
}

#define TITAN_REGISTRY_CREATE(kind, Interface, bit)                                              \
  std::unique_ptr<Interface> PluginRegistry::create_##kind(const std::string& name,             \
                                                           const PluginContext& context) {       \
    return impl_->create<Interface>(name, context, &Impl::Loaded::kind##_factory, kind_##kind); \
  }
TITAN_SINGLE_FACTORY_KINDS(TITAN_REGISTRY_CREATE)
#undef TITAN_REGISTRY_CREATE

std::string PluginRegistry::plan_entry(const std::string& name, const PlannedLayout& layout) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  const Impl::Loaded& plugin = impl_->get(name);
  if (!plugin.plan_entry) {
    throw Error("plugin '" + plugin.info.name + "' (" + plugin.info.path + ") writes no entry for titan plan's " +
                "configs (it registers no plan_entry); give the role another plugin in TITAN_PLAN_PLUGINS");
  }
  try {
    return plugin.plan_entry(layout, plugin.info.name);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& error) {
    throw Error("plugin '" + plugin.info.name + "': its plan entry failed: " + error.what());
  }
}

std::vector<std::string> PluginRegistry::pipeline_schedules() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  std::vector<std::string> names;
  for (const auto& [name, plugin] : impl_->plugins) {
    for (const auto& entry : plugin->pipeline_schedules) names.push_back(entry.first);
  }
  return names;
}

std::unique_ptr<PipelineSchedule> PluginRegistry::create_pipeline_schedule(const std::string& name,
                                                                           const PluginContext& context) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  auto find = [&]() -> std::pair<Impl::Loaded*, const std::pair<std::string, Factory<PipelineSchedule>>*> {
    for (const auto& [plugin_name, plugin] : impl_->plugins) {
      for (const auto& entry : plugin->pipeline_schedules) {
        if (Impl::lower(entry.first) == Impl::lower(name)) return {plugin.get(), &entry};
      }
    }
    return {nullptr, nullptr};
  };
  auto [plugin, entry] = find();
  // TorchTitan names schedules without a plugin: the build's default ones load on first use.
  const std::string builtin = default_plugin("pipeline_schedule");
  if (!plugin && !builtin.empty() && !impl_->plugins.count(builtin) && impl_->discover().count(builtin)) {
    impl_->get(builtin);
    std::tie(plugin, entry) = find();
  }
  if (!plugin) {
    std::vector<std::string> names;
    for (const auto& [plugin_name, loaded] : impl_->plugins) {
      for (const auto& known : loaded->pipeline_schedules) names.push_back(known.first);
    }
    std::string hint = closest_match(name, names);
    throw Error("pipeline_parallel_schedule '" + name + "' is not provided by any loaded plugin" +
                (hint.empty() ? "" : "; did you mean '" + hint + "'?") + " (known: " + c10::Join(", ", names) +
                "; load a third-party schedule's plugin first: list it under plugins: in the config, or give "
                "--plugin NAME to titan pp-schedule)");
  }
  std::unique_ptr<PipelineSchedule> schedule;
  try {
    schedule = entry->second(context);
  } catch (const ConfigError&) {
    throw;
  } catch (const std::exception& error) {
    throw Error("plugin '" + plugin->info.name + "' failed to create pipeline schedule '" + entry->first +
                "': " + error.what());
  }
  if (!schedule) throw Error("plugin '" + plugin->info.name + "' returned no pipeline schedule '" + entry->first + "'");
  if (Impl::lower(schedule->name()) != Impl::lower(entry->first)) {
    throw Error("plugin '" + plugin->info.name + "' registered pipeline schedule '" + entry->first +
                "' but its object is named '" + schedule->name() + "'");
  }
  return schedule;
}

}  // namespace titan
