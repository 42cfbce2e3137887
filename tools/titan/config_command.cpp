// `titan config check CONFIG [--set ...]`: plans the run (loads plugins,
// reads every option) without training.
#include <iostream>

#include "commands.h"
#include "titan/error.hpp"
#include "titan/logging.hpp"
#include "titan/run_plan.hpp"

namespace titan::cli {

namespace {
const char* kUsage =
    "usage: titan config check CONFIG [--set key.path=value ...] [--print]\n"
    "  Validates CONFIG: YAML syntax, every key and type, plugins and their options.\n"
    "  --print writes the resolved config (defaults filled in) to stdout.\n";
}

int config_command(const Args& args) {
  if (args.empty() || wants_help(args)) {
    std::cout << kUsage;
    return args.empty() ? 2 : 0;
  }
  if (args[0] != "check") throw Error("unknown config command '" + args[0] + "'\n" + kUsage);
  Args rest(args.begin() + 1, args.end());
  bool print = false;
  rest.erase(std::remove_if(rest.begin(), rest.end(), [&](const std::string& arg) {
               if (arg == "--print") print = true;
               return arg == "--print";
             }),
             rest.end());
  RunArgs run = parse_run_args(rest, kUsage);
  init_logging(0, run.log_level.empty() ? "warn" : run.log_level);
  ConfigNode config = ConfigNode::load_file(run.config_path);
  for (const auto& assignment : run.overrides) config.apply_override(assignment);
  RunPlan plan = plan_run(config);
  if (print) std::cout << plan.root.dump() << "\n";
  std::cout << run.config_path << ": ok (model " << plan.model_plugin << " " << plan.model->flavor() << ", "
            << plan.parallelizers.size() << " parallelizers)\n";
  return 0;
}

}  // namespace titan::cli
