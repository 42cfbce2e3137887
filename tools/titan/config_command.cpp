// `titan config check CONFIG [--set ...]`: resolves the run (loads plugins,
// reads every option) without training.
#include <iostream>

#include "commands.h"
#include "titan/assets.hpp"
#include "titan/device_mesh.hpp"
#include "titan/error.hpp"
#include "titan/logging.hpp"
#include "titan/run_spec.hpp"
#include "titan/tokenizer.hpp"

namespace titan::cli {

namespace {
const char* kConfigUsage =
    "usage: titan config check CONFIG [--set key.path=value ...] [--world-size N] [--print]\n"
    "  Validates CONFIG: YAML syntax, every key and type, plugins and their options, and\n"
    "  the parallelism against the model (heads, FFN width, vocabulary, sequence length).\n"
    "  --world-size N also resolves -1 degrees and checks that the degrees multiply to N.\n"
    "  --print writes the resolved config (defaults filled in) to stdout.\n";
}

int config_command(const Args& args) {
  if (args.empty() || wants_help(args)) {
    std::cout << kConfigUsage;
    return args.empty() ? 2 : 0;
  }
  if (args[0] != "check") throw Error("unknown config command '" + args[0] + "'\n" + kConfigUsage);
  Args rest(args.begin() + 1, args.end());
  bool print = false;
  rest.erase(std::remove_if(rest.begin(), rest.end(), [&](const std::string& arg) {
               if (arg == "--print") print = true;
               return arg == "--print";
             }),
             rest.end());
  int world_size = 0;  // unknown
  for (size_t i = 0; i < rest.size(); ++i) {
    if (rest[i] != "--world-size") continue;
    if (i + 1 == rest.size()) throw Error("--world-size needs a number of ranks\n" + std::string(kConfigUsage));
    try {
      world_size = std::stoi(rest[i + 1]);
    } catch (const std::exception&) {
      world_size = 0;
    }
    if (world_size < 1) throw Error("--world-size: expected a number of ranks >= 1, got '" + rest[i + 1] + "'");
    rest.erase(rest.begin() + static_cast<long>(i), rest.begin() + static_cast<long>(i) + 2);
    break;
  }
  RunArgs run = parse_run_args(rest, kConfigUsage);
  init_logging(0, run.log_level.empty() ? "warn" : run.log_level);
  ConfigNode config = ConfigNode::load_file(run.config_path);
  for (const auto& assignment : run.overrides) config.apply_override(assignment);
  RunSpec spec = resolve_run(config);
  // The tokenizer decides the vocabulary; without its file (a large model's
  // config checked on a laptop) the flavor's own vocabulary is checked.
  try {
    spec.model->set_vocab_size(load_tokenizer(resolve_asset(spec.core.tokenizer_path))->vocab_size());
  } catch (const Error& error) {
    std::cerr << "note: " << error.what() << "; checking with the flavor's vocabulary (" << spec.model->vocab_size()
              << ")\n";
  }
  std::map<std::string, int64_t> degrees = requested_degrees(spec);
  if (world_size > 0) {
    degrees = resolve_mesh_degrees(mesh_requests(spec), world_size);
  }
  validate_parallelism(spec, degrees);
  if (print) std::cout << spec.root.dump() << "\n";
  std::cout << run.config_path << ": ok (model " << spec.model_plugin << " " << spec.model->flavor() << ", "
            << spec.parallelizers.size() << " parallelizers)\n";
  return 0;
}

}  // namespace titan::cli
