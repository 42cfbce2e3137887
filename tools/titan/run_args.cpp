// Parsing shared by the commands that take a run config.
#include <iostream>

#include "commands.h"
#include "titan/error.hpp"
#include "titan/logging.hpp"

namespace titan::cli {

bool wants_help(const Args& args) {
  for (const auto& arg : args) {
    if (arg == "--help" || arg == "-h") return true;
  }
  return false;
}

RunArgs parse_run_args(const Args& args, const std::string& usage) {
  RunArgs parsed;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    auto value = [&](const std::string& flag) -> std::string {
      if (i + 1 >= args.size()) throw Error(flag + " needs a value\n" + usage);
      return args[++i];
    };
    if (arg == "--set") {
      parsed.overrides.push_back(value(arg));
    } else if (arg.rfind("--set=", 0) == 0) {
      parsed.overrides.push_back(arg.substr(6));
    } else if (arg == "--log-level") {
      parsed.log_level = value(arg);
    } else if (arg.rfind("--log-level=", 0) == 0) {
      parsed.log_level = arg.substr(12);
    } else if (arg.rfind("--", 0) == 0) {
      throw Error("unknown option '" + arg + "'\n" + usage);
    } else if (parsed.config_path.empty()) {
      parsed.config_path = arg;
    } else {
      throw Error("unexpected argument '" + arg + "'\n" + usage);
    }
  }
  if (parsed.config_path.empty()) throw Error("a config file is required\n" + usage);
  return parsed;
}

StartedRun start_run(const RunArgs& run, const std::vector<std::string>& forced) {
  World world = detect_world();
  init_logging(world.rank, run.log_level);
  ConfigNode config = ConfigNode::load_file(run.config_path);
  for (const auto& assignment : run.overrides) config.apply_override(assignment);
  for (const auto& assignment : forced) config.apply_override(assignment);
  RunSpec spec = resolve_run(config, world.rank, world.world_size);
  return {world, std::move(spec)};
}

}  // namespace titan::cli
