// `titan plan --model M --flavor F --gpus N --device D --seq-len S
// --global-batch-tokens T`: the layout search's table of the best layouts,
// the assumptions behind it and each layout's config, or the same as JSON.
#include "plan_search_command.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <sstream>

#include <c10/util/StringUtil.h>

#include "titan/device_table.hpp"
#include "titan/error.hpp"
#include "titan/layout_search.hpp"
#include "titan/logging.hpp"

namespace titan::cli {

namespace {

const char* kPlanSearchUsage =
    "usage: titan plan --model NAME --flavor F --gpus N --device D --seq-len S --global-batch-tokens T\n"
    "                  [--top K] [--margin M] [--layout dim=degree,...] [--tokenizer PATH] [--json]\n"
    "  Searches the layouts of model NAME (a model plugin) on N devices of kind D: every\n"
    "  dp_replicate x dp_shard x tp x pp (schedule, microbatches) x cp (x ep for MoE), activation\n"
    "  checkpointing and float8; keeps those whose modelled peak memory per device is at most M\n"
    "  (default 0.9) of the device's, ranks them by predicted tokens/s and prints the best K\n"
    "  (default 5), one per mesh and schedule, each with a config that `titan config check\n"
    "  --world-size N` accepts. T is the job's tokens per step (a multiple of S).\n"
    "  --layout fixes degrees (e.g. dp_shard=32,tp=8) to see what a given layout is predicted to do.\n"
    "  --tokenizer goes into the configs (otherwise a placeholder; the flavor's vocabulary is planned).\n"
    "  --json prints the whole result for tools. Exit status 1 when nothing fits; the message says the\n"
    "  device memory, or the number of devices, that would fit the smallest layout.\n";

int64_t count_of(const std::string& flag, const std::string& text) {
  size_t used = 0;
  int64_t value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || value < 1) throw Error(flag + ": expected a positive integer, got '" + text + "'");
  return value;
}

// "dp_shard=32,tp=8"
std::map<std::string, int64_t> parse_layout(const std::string& text) {
  std::map<std::string, int64_t> degrees;
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    const size_t equals = item.find('=');
    if (equals == std::string::npos) {
      throw Error("--layout: expected dim=degree items separated by commas (e.g. dp_shard=32,tp=8), got '" + item +
                  "'");
    }
    degrees[item.substr(0, equals)] = count_of("--layout " + item.substr(0, equals), item.substr(equals + 1));
  }
  return degrees;
}

struct Options {
  SearchRequest request;
  bool json = false;
};

Options parse(const Args& args) {
  Options options;
  SearchRequest& request = options.request;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& flag = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) throw Error(flag + " needs a value\n" + kPlanSearchUsage);
      return args[++i];
    };
    if (flag == "--model") request.model = value();
    else if (flag == "--flavor") request.flavor = value();
    else if (flag == "--device") request.device = value();
    else if (flag == "--gpus") request.devices = count_of(flag, value());
    else if (flag == "--seq-len") request.seq_len = count_of(flag, value());
    else if (flag == "--global-batch-tokens") request.global_batch_tokens = count_of(flag, value());
    else if (flag == "--top") request.top = static_cast<int>(count_of(flag, value()));
    else if (flag == "--tokenizer") request.tokenizer_path = value();
    else if (flag == "--layout") request.fixed = parse_layout(value());
    else if (flag == "--json") options.json = true;
    else if (flag == "--margin") {
      const std::string text = value();
      try {
        request.margin = std::stod(text);
      } catch (const std::exception&) {
        throw Error("--margin: expected a share of the device's memory such as 0.9, got '" + text + "'");
      }
    } else {
      throw Error("unknown option '" + flag + "'\n" + kPlanSearchUsage);
    }
  }
  std::vector<std::string> missing;
  if (request.model.empty()) missing.push_back("--model");
  if (request.flavor.empty()) missing.push_back("--flavor");
  if (request.devices == 0) missing.push_back("--gpus");
  if (request.device.empty()) missing.push_back("--device (one of " + c10::Join(", ", known_device_names()) + ")");
  if (request.seq_len == 0) missing.push_back("--seq-len");
  if (request.global_batch_tokens == 0) missing.push_back("--global-batch-tokens");
  if (!missing.empty()) throw Error("missing " + c10::Join(", ", missing) + "\n" + kPlanSearchUsage);
  return options;
}

std::string fixed(double value, int digits) {
  char text[48];
  std::snprintf(text, sizeof(text), "%.*f", digits, value);
  return text;
}

std::string gib(double bytes) { return fixed(bytes / (1024.0 * 1024 * 1024), 1); }

std::string pad(const std::string& text, size_t width) {
  return text.size() >= width ? text : text + std::string(width - text.size(), ' ');
}

void print_table(const SearchResult& result) {
  const SearchRequest& request = result.request;
  const double params = static_cast<double>(result.model.params);
  std::cout << result.model.name << " " << result.model.flavor << " ("
            << (params >= 1e9 ? fixed(params / 1e9, 1) + "B" : fixed(params / 1e6, 1) + "M") << " parameters) on "
            << request.devices << " x " << result.device.name << ", seq_len " << request.seq_len << ", "
            << request.global_batch_tokens << " tokens a step: " << result.candidates << " layouts, " << result.fitting
            << " fit in " << fixed(request.margin * 100, 0) << "% of "
            << gib(static_cast<double>(result.device.memory_bytes)) << " GiB\n\n";
  std::vector<std::vector<std::string>> rows = {
      {"#", "layout", "pipeline", "AC", "float8", "batch", "GiB/dev", "tokens/s/dev", "MFU", "step s"}};
  int index = 0;
  for (const auto& plan : result.top) {
    const Layout& layout = plan.layout;
    const std::string pipeline =
        layout.schedule.empty() ? "-" : layout.schedule + " " + std::to_string(layout.microbatches) + "x" +
                                            std::to_string(layout.microbatch_size);
    const std::string batch = std::to_string(layout.local_batch_size) +
                              (layout.accumulation > 1 ? " x" + std::to_string(layout.accumulation) : "");
    rows.push_back({std::to_string(++index), layout.mesh.to_string(), pipeline, ac_mode_name(layout.ac),
                    layout.float8 ? "on" : "off", batch, gib(plan.memory.total()),
                    fixed(plan.estimate.tokens_per_s_per_device, 0), fixed(100 * plan.estimate.mfu, 1) + "%",
                    fixed(plan.estimate.step_s, 2)});
  }
  std::vector<size_t> widths(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size() + 2);
  }
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) std::cout << pad(row[c], widths[c]);
    std::cout << "\n";
  }
  std::cout << "\nbatch: sequences per data-parallel rank per microbatch (x gradient accumulation steps); "
               "pipeline: schedule, microbatches x sequences each\n";
  for (const auto& refused : result.refused) std::cout << "refused by config check: " << refused << "\n";
  std::cout << "\nAssumptions:\n";
  for (const auto& line : result.assumptions) std::cout << "  - " << line << "\n";
  index = 0;
  for (const auto& plan : result.top) std::cout << "\n# ---- layout " << ++index << "\n" << plan.yaml;
}

}  // namespace

int plan_search_command(const Args& args) {
  if (wants_help(args)) {
    std::cout << kPlanSearchUsage;
    return 0;
  }
  Options options = parse(args);
  init_logging(0, "warn");
  SearchResult result = search_layouts(options.request);
  if (options.json) {
    std::cout << search_result_json(result);
  } else if (result.nothing_fits.empty()) {
    print_table(result);
  }
  if (!result.nothing_fits.empty()) {
    if (!options.json) std::cerr << "titan plan: " << result.nothing_fits << "\n";
    return 1;
  }
  if (result.top.empty()) {
    throw Error("every layout that fits was refused by config check (first: " + result.refused.front() + ")");
  }
  return 0;
}

}  // namespace titan::cli
