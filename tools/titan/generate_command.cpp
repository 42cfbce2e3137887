// `titan generate FOLDER --prompt TEXT [...]`: a checkpoint's (or a Hugging
// Face folder's) continuation of a prompt, greedy or sampled, on one process.
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "checkpoint_hf.h"
#include "commands.h"
#include "titan/error.hpp"
#include "titan/generation.hpp"
#include "titan/logging.hpp"
#include "titan/safetensors.hpp"

namespace titan::cli {

namespace {

const char* kGenerateUsage =
    "usage: titan generate FOLDER --prompt TEXT [--config CONFIG] [--set key=value ...]\n"
    "                      [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S]\n"
    "                      [--no-bos] [--ignore-eos] [--no-cache] [--json] [--log-level L]\n"
    "  Continues TEXT with the model of FOLDER: a checkpoint step folder (its config.yaml says the model and\n"
    "  tokenizer) or a Hugging Face safetensors folder (then --config names the run config of the model).\n"
    "  Runs on one process, on training.device, through a KV cache (--no-cache: the whole sequence again\n"
    "  for every token). Greedy unless --temperature > 0, which samples (then --top-k, --top-p, --seed).\n"
    "  The prompt starts with the tokenizer's BOS unless --no-bos; the continuation ends at its EOS unless\n"
    "  --ignore-eos, or after --max-new-tokens (default 64). Prints the prompt and its continuation, then\n"
    "  the decoding rate; --json prints one JSON object with the token ids instead.\n";

struct GenerateArgs {
  std::string folder;
  std::string prompt;
  bool has_prompt = false;
  std::string config_path;
  std::vector<std::string> overrides;
  std::string log_level;
  GenerationOptions generation;
  bool bos = true;
  bool stop_at_eos = true;
  bool json = false;
};

int64_t parse_count(const std::string& flag, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || value < 0) {
    throw Error(flag + ": expected an integer >= 0, got '" + text + "'");
  }
  return value;
}

double parse_real(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0') throw Error(flag + ": expected a number, got '" + text + "'");
  return value;
}

GenerateArgs parse_generate(const Args& args) {
  GenerateArgs parsed;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i], inline_value;
    bool has_inline = false;
    if (const size_t equals = flag.find('='); flag.rfind("--", 0) == 0 && equals != std::string::npos) {
      inline_value = flag.substr(equals + 1);
      flag = flag.substr(0, equals);
      has_inline = true;
    }
    auto value = [&]() -> std::string {
      if (has_inline) return inline_value;
      if (i + 1 >= args.size()) throw Error(flag + " needs a value\n" + kGenerateUsage);
      return args[++i];
    };
    SamplingOptions& sampling = parsed.generation.sampling;
    if (flag == "--prompt") {
      parsed.prompt = value();
      parsed.has_prompt = true;
    } else if (flag == "--config") {
      parsed.config_path = value();
    } else if (flag == "--set") {
      parsed.overrides.push_back(value());
    } else if (flag == "--log-level") {
      parsed.log_level = value();
    } else if (flag == "--max-new-tokens") {
      parsed.generation.max_new_tokens = parse_count(flag, value());
    } else if (flag == "--temperature") {
      sampling.temperature = parse_real(flag, value());
    } else if (flag == "--top-k") {
      sampling.top_k = parse_count(flag, value());
    } else if (flag == "--top-p") {
      sampling.top_p = parse_real(flag, value());
    } else if (flag == "--seed") {
      parsed.generation.seed = static_cast<uint64_t>(parse_count(flag, value()));
    } else if (flag == "--no-bos" && !has_inline) {
      parsed.bos = false;
    } else if (flag == "--ignore-eos" && !has_inline) {
      parsed.stop_at_eos = false;
    } else if (flag == "--no-cache" && !has_inline) {
      parsed.generation.use_cache = false;
    } else if (flag == "--json" && !has_inline) {
      parsed.json = true;
    } else if (flag.rfind("--", 0) == 0) {
      throw Error("unknown option '" + args[i] + "'\n" + kGenerateUsage);
    } else if (parsed.folder.empty()) {
      parsed.folder = flag;
    } else {
      throw Error("unexpected argument '" + flag + "'\n" + kGenerateUsage);
    }
  }
  if (parsed.folder.empty()) throw Error("a checkpoint step folder or a Hugging Face folder is required\n" + std::string(kGenerateUsage));
  if (!parsed.has_prompt) throw Error("--prompt TEXT is required\n" + std::string(kGenerateUsage));
  if (parsed.generation.max_new_tokens < 1) throw Error("--max-new-tokens must be >= 1");
  if (std::string problem = sampling_problem(parsed.generation.sampling); !problem.empty()) throw Error(problem);
  return parsed;
}

// The run config of FOLDER's model: --config, else the step folder's own.
ConfigNode config_of(const GenerateArgs& args) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(args.folder)) {
    throw Error("'" + args.folder + "' is not a folder (expected a checkpoint step folder or a Hugging Face folder)");
  }
  std::string path = args.config_path;
  if (path.empty()) {
    path = (fs::path(args.folder) / "config.yaml").string();
    if (!fs::exists(path)) {
      throw Error(safetensors::is_hf_folder(args.folder)
                      ? "'" + args.folder + "' is a Hugging Face folder: give the run config of its model with "
                                            "--config CONFIG (model.name, model.flavor and the tokenizer)"
                      : "'" + args.folder + "' has no config.yaml; expected a checkpoint step folder (e.g. "
                                            "outputs/run/checkpoint/step-100) or a Hugging Face folder with --config");
    }
  }
  ConfigNode config = ConfigNode::load_file(path);
  for (const auto& assignment : args.overrides) config.apply_override(assignment);
  return config;
}

std::vector<int64_t> widen(const std::vector<int32_t>& ids) { return {ids.begin(), ids.end()}; }

std::vector<int32_t> narrow(const std::vector<int64_t>& ids) { return {ids.begin(), ids.end()}; }

}  // namespace

int generate_command(const Args& args) {
  if (wants_help(args)) {
    std::cout << kGenerateUsage;
    return 0;
  }
  GenerateArgs parsed = parse_generate(args);
  init_logging(0, parsed.log_level);
  CheckpointSpec resolved = spec_for_checkpoint(config_of(parsed));
  const Tokenizer& tokenizer = *resolved.tokenizer;
  std::vector<int64_t> prompt = widen(tokenizer.encode(parsed.prompt));
  if (parsed.bos) prompt.insert(prompt.begin(), tokenizer.bos_id());
  if (prompt.empty()) throw Error("--prompt is empty and --no-bos leaves no token to start from");
  if (parsed.stop_at_eos) parsed.generation.stop_id = tokenizer.eos_id();

  auto model = load_model_for_inference(resolved.spec, parsed.folder);
  const Generation generation = generate(*model, prompt, parsed.generation);
  std::vector<int64_t> text_ids = generation.tokens;
  if (generation.stopped) text_ids.pop_back();  // the EOS ends the text, it is not part of it
  const std::string continuation = tokenizer.decode(narrow(text_ids));
  if (parsed.json) {
    nlohmann::json result = {{"prompt_ids", prompt},
                             {"ids", generation.tokens},
                             {"text", continuation},
                             {"stopped_at_eos", generation.stopped},
                             {"kv_cache", generation.cached},
                             {"prompt_seconds", generation.prompt_seconds},
                             {"decode_seconds", generation.decode_seconds},
                             {"tokens_per_sec", generation.tokens_per_sec()}};
    std::cout << result.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return 0;
  }
  std::cout << parsed.prompt << continuation << std::endl;  // before the rate, which goes to stderr
  spdlog::info("{} tokens ({}{}): prompt of {} tokens in {:.3f} s, then {:.1f} tokens/s{}", generation.tokens.size(),
               parsed.generation.sampling.temperature > 0 ? "sampled" : "greedy",
               generation.stopped ? ", ended at EOS" : "", prompt.size(), generation.prompt_seconds,
               generation.tokens_per_sec(), generation.cached ? " with a KV cache" : " without a KV cache");
  return 0;
}

}  // namespace titan::cli
