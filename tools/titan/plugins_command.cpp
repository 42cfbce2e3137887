// `titan plugins list` and `titan plugins inspect NAME`.
#include <iomanip>
#include <iostream>

#include "commands.h"
#include "titan/compat.hpp"
#include "titan/error.hpp"
#include "titan/plugin_interfaces.hpp"
#include "titan/registry.hpp"

namespace titan::cli {

namespace {

const char* kPluginsUsage =
    "usage: titan plugins list\n"
    "       titan plugins inspect NAME|PATH.so\n"
    "  Search path: job.plugin_path, TITAN_PLUGIN_PATH, the plugins beside the running libtitan_core (an\n"
    "  installed SDK's), the build tree, the configured install prefix.\n";

void print_options(const std::string& kind, const ConfigNode& options) {
  const auto& docs = options.documented();
  std::cout << "  " << kind << " options:" << (docs.empty() ? " (none)" : "") << "\n";
  for (const auto& doc : docs) {
    std::cout << "    " << std::left << std::setw(28) << doc.key << std::setw(14) << doc.type
              << std::setw(14) << (doc.fallback.empty() ? "(required)" : doc.fallback) << doc.doc << "\n";
  }
}

// Creates each kind with empty options so that every option it reads is
// recorded with its type, default and doc.
void inspect(const std::string& name) {
  auto& registry = PluginRegistry::instance();
  const PluginInfo& info = registry.load(name);
  std::cout << info.name << " " << info.version << "\n"
            << "  " << info.summary << "\n"
            << "  kinds:        " << kinds_to_string(info.kinds) << "\n"
            << "  plugin ABI:   " << kPluginAbiVersion << "\n"
            << "  LibTorch:     " << info.torch_version << "\n"
            << "  CUDA:         " << compat::cuda_summary() << "\n"
            << "  file:         " << info.path << "\n";
  auto show = [&](uint32_t kind, auto create) {
    if (!(info.kinds & kind)) return;
    PluginContext context;
    context.options = ConfigNode::parse("{}", "<inspect>");
    context.training_steps = 1000;
    try {
      create(context);
    } catch (const std::exception& error) {
      std::cout << "  " << kinds_to_string(kind) << ": needs options to be created (" << error.what() << ")\n";
    }
    print_options(kinds_to_string(kind), context.options);
  };
#define TITAN_SHOW_KIND(kind, Interface, bit) show(kind_##kind, [&](auto& c) { registry.create_##kind(info.name, c); });
  TITAN_SINGLE_FACTORY_KINDS(TITAN_SHOW_KIND)
#undef TITAN_SHOW_KIND
  for (const auto& name : info.pipeline_schedules) {
    PluginContext context;
    context.options = ConfigNode::parse("{}", "<inspect>");
    auto schedule = registry.create_pipeline_schedule(name, context);
    const auto range = schedule->stages_per_rank();
    std::string per_rank = range.min == range.max ? std::to_string(range.min)
                           : range.max == 0       ? std::to_string(range.min) + "+"
                                                  : std::to_string(range.min) + "-" + std::to_string(range.max);
    std::cout << "  pipeline schedule " << std::left << std::setw(22) << name << placement_name(schedule->placement())
              << " placement, " << per_rank << " stage(s) per rank\n";
    if (!context.options.documented().empty()) print_options("  " + name, context.options);
  }
}

}  // namespace

int plugins_command(const Args& args) {
  if (args.empty() || wants_help(args)) {
    std::cout << kPluginsUsage;
    return args.empty() ? 2 : 0;
  }
  auto& registry = PluginRegistry::instance();
  if (args[0] == "list") {
    auto names = registry.available();
    std::cout << std::left << std::setw(22) << "plugin" << std::setw(10) << "version" << std::setw(40) << "kinds"
              << "summary\n";
    int failures = 0;
    for (const auto& name : names) {
      try {
        const PluginInfo& info = registry.load(name);
        std::cout << std::setw(22) << info.name << std::setw(10) << info.version << std::setw(40)
                  << kinds_to_string(info.kinds) << info.summary << "\n";
      } catch (const std::exception& error) {
        ++failures;
        std::cout << std::setw(22) << name << "(cannot be loaded: " << error.what() << ")\n";
      }
    }
    if (names.empty()) std::cout << "(no plugins found)\n";
    return failures ? 1 : 0;
  }
  if (args[0] == "inspect") {
    if (args.size() != 2) throw Error(std::string("plugins inspect needs one plugin name\n") + kPluginsUsage);
    inspect(args[1]);
    return 0;
  }
  throw Error("unknown plugins command '" + args[0] + "'\n" + kPluginsUsage);
}

}  // namespace titan::cli
