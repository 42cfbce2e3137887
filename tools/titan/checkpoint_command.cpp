// `titan checkpoint export|import`: model-only conversion between Titan
// checkpoints (the dcp plugin's step folders) and Hugging Face
// safetensors folders. Argument parsing here; the work in checkpoint_*.cpp.
#include <algorithm>
#include <iostream>
#include <map>

#include "checkpoint_hf.h"
#include "commands.h"
#include "titan/error.hpp"
#include "titan/logging.hpp"

namespace titan::cli {

namespace {

const char* kCheckpointUsage =
    "usage: titan checkpoint export CKPT_STEP_DIR --format safetensors --out DIR\n"
    "                               [--dtype bfloat16|float32] [--max-shard-bytes N]\n"
    "       titan checkpoint import HF_DIR --config CONFIG.yaml --out CKPT_STEP_DIR [--set key=value ...]\n"
    "  export: writes the model of a checkpoint step folder (with its config.yaml) as a Hugging Face\n"
    "          folder: config.json and model.safetensors (or shards plus model.safetensors.index.json).\n"
    "          --dtype defaults to checkpoint.export_dtype, else float32.\n"
    "  import: writes a model-only checkpoint step folder from a Hugging Face safetensors folder, for\n"
    "          the run CONFIG.yaml describes (start it with checkpoint.initial_load_path=CKPT_STEP_DIR,\n"
    "          or point initial_load_path at HF_DIR directly).\n";

// Flags with one value each; the rest are positional.
struct Parsed {
  std::vector<std::string> positional;
  std::map<std::string, std::string> flags;
  std::vector<std::string> sets;
};

Parsed parse(const Args& args, const std::vector<std::string>& known) {
  Parsed parsed;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.rfind("--", 0) != 0) {
      parsed.positional.push_back(arg);
      continue;
    }
    std::string flag = arg, value;
    size_t equals = arg.find('=');
    if (equals != std::string::npos) {
      flag = arg.substr(0, equals);
      value = arg.substr(equals + 1);
    } else {
      if (i + 1 >= args.size()) throw Error(arg + " needs a value\n" + kCheckpointUsage);
      value = args[++i];
    }
    if (std::find(known.begin(), known.end(), flag) == known.end()) {
      throw Error("unknown option '" + flag + "'\n" + kCheckpointUsage);
    }
    if (flag == "--set") {
      parsed.sets.push_back(value);
    } else {
      parsed.flags[flag] = value;
    }
  }
  return parsed;
}

std::string required(const Parsed& parsed, const std::string& flag) {
  auto found = parsed.flags.find(flag);
  if (found == parsed.flags.end() || found->second.empty()) throw Error(flag + " is required\n" + kCheckpointUsage);
  return found->second;
}

std::string single_positional(const Parsed& parsed, const std::string& what) {
  if (parsed.positional.size() != 1) throw Error("expected one " + what + "\n" + kCheckpointUsage);
  return parsed.positional[0];
}

int run_export(const Args& args) {
  Parsed parsed = parse(args, {"--format", "--out", "--dtype", "--max-shard-bytes", "--log-level"});
  ExportOptions options;
  options.step_dir = single_positional(parsed, "CKPT_STEP_DIR");
  options.out_dir = required(parsed, "--out");
  std::string format = parsed.flags.count("--format") ? parsed.flags["--format"] : "safetensors";
  if (format != "safetensors") throw Error("--format: only 'safetensors' is supported, got '" + format + "'");
  options.dtype = parsed.flags.count("--dtype") ? parsed.flags["--dtype"] : "";
  if (parsed.flags.count("--max-shard-bytes")) {
    try {
      options.max_shard_bytes = std::stoll(parsed.flags["--max-shard-bytes"]);
    } catch (const std::exception&) {
      options.max_shard_bytes = 0;
    }
    if (options.max_shard_bytes <= 0) {
      throw Error("--max-shard-bytes must be a positive integer, got '" + parsed.flags["--max-shard-bytes"] + "'");
    }
  }
  init_logging(0, parsed.flags.count("--log-level") ? parsed.flags["--log-level"] : "info");
  export_safetensors(options);
  return 0;
}

int run_import(const Args& args) {
  Parsed parsed = parse(args, {"--config", "--out", "--set", "--log-level"});
  ImportOptions options;
  options.hf_dir = single_positional(parsed, "HF_DIR");
  options.config_path = required(parsed, "--config");
  options.out_dir = required(parsed, "--out");
  options.overrides = parsed.sets;
  init_logging(0, parsed.flags.count("--log-level") ? parsed.flags["--log-level"] : "info");
  import_safetensors(options);
  return 0;
}

}  // namespace

int checkpoint_command(const Args& args) {
  if (args.empty() || wants_help(args)) {
    std::cout << kCheckpointUsage;
    return args.empty() ? 2 : 0;
  }
  Args rest(args.begin() + 1, args.end());
  if (args[0] == "export") return run_export(rest);
  if (args[0] == "import") return run_import(rest);
  throw Error("unknown checkpoint command '" + args[0] + "'\n" + kCheckpointUsage);
}

}  // namespace titan::cli
