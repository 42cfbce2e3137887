// `titan plan CONFIG --world-size N`: the dry run of a config at any world
// size on this machine, printed per class of alike ranks (or as JSON), and
// `titan plan --model ...`: the layout search (plan_search_command.cpp).
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "plan_search_command.h"
#include "titan/device_table.hpp"
#include "titan/dry_run.hpp"
#include "titan/error.hpp"
#include "titan/logging.hpp"

namespace titan::cli {

namespace {

const char* kPlanUsage =
    "usage: titan plan CONFIG --world-size N [--set key.path=value ...] [--steps S] [--every-rank]\n"
    "                  [--serial] [--device D] [--json]\n"
    "       titan plan --model NAME --flavor F --gpus N --device D --seq-len S --global-batch-tokens T ...\n"
    "  The first form is a dry run: every one of the N ranks is a thread of this process that builds the\n"
    "  real mesh, model and plugins and runs S training steps (default 2) on meta tensors through simulated\n"
    "  process groups. It fails, naming the group, ranks and call sites, when the ranks' collectives do not\n"
    "  line up or a send is never received; otherwise it prints each rank's measured peak memory (and\n"
    "  where), FLOPs and bytes per collective of the last step. Ranks that differ only in their data-parallel\n"
    "  coordinates are simulated once (the run checks that their shards are even); --every-rank simulates\n"
    "  each one. Alike ranks are printed once. --device D (h100-80gb, h200, b200, a100-80gb, cpu) adds the\n"
    "  step time the slowest rank's measured work would take there, with the model's assumptions.\n"
    "  The rank threads run side by side; --serial runs one at a time, for plugins that keep\n"
    "  process-wide state.\n"
    "  The second form searches layouts for a model on a cluster (`titan plan --model x --help`).\n";

std::string gib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return text;
}

std::string scientific(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3g", value);
  return text;
}

// "0-7,16,18" for a sorted list of ranks.
std::string rank_ranges(const std::vector<int>& ranks) {
  std::string text;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    text += (text.empty() ? "" : ",") + std::to_string(ranks[i]) + (j > i ? "-" + std::to_string(ranks[j]) : "");
    i = j + 1;
  }
  return text;
}

std::string traffic_text(const RankPlan& rank) {
  std::string text;
  for (const auto& [key, total] : rank.traffic()) {
    text += (text.empty() ? "" : "; ") + key.first + " " + key.second + " " + std::to_string(total.calls) + "x " +
            gib(total.bytes) + " GiB";
  }
  return text.empty() ? "none" : text;
}

// Ranks whose every printed number is the same form one class.
std::vector<std::vector<int>> alike_ranks(const DryRunReport& report) {
  std::map<std::string, std::vector<int>> classes;
  std::vector<std::string> order;
  for (const RankPlan& rank : report.ranks) {
    std::ostringstream key;
    key << rank.checkpoint_bytes << "/" << rank.parameter_bytes << "/" << rank.gradient_bytes << "/" << rank.optimizer_bytes << "/" << rank.peak_bytes
        << "/" << rank.flops << "/" << rank.recompute_flops << "/" << traffic_text(rank);
    auto [it, inserted] = classes.try_emplace(key.str());
    if (inserted) order.push_back(key.str());
    it->second.push_back(rank.rank);
  }
  std::vector<std::vector<int>> result;
  for (const auto& key : order) result.push_back(classes[key]);
  return result;  // simulated ranks, alike
}

void print_table(const std::string& config_path, const DryRunReport& report) {
  std::printf("%s at %d ranks: %s, mesh %s; dry run of %lld steps of %d simulated ranks in %.2f s\n",
              config_path.c_str(), report.world_size, report.model.c_str(),
              report.mesh.empty() ? "(none)" : report.mesh.c_str(), static_cast<long long>(report.measured_step),
              report.simulated_ranks(), report.seconds);
  int64_t collectives = 0;
  for (const RankPlan& rank : report.ranks) collectives += static_cast<int64_t>(rank.collectives.size());
  std::printf("job: %.3gB parameters, %lld tokens per step, model FLOPs %s per step\n", report.parameters / 1e9,
              static_cast<long long>(report.tokens_per_step), scientific(report.model_flops_per_step).c_str());
  std::printf("collectives line up across every group (%lld calls in step %lld); every send was received\n",
              static_cast<long long>(collectives), static_cast<long long>(report.measured_step));
  int64_t host_waits = 0;
  for (const RankPlan& rank : report.ranks) host_waits += rank.host_waits;
  if (host_waits == 0) {
    std::printf("host waits: none (nothing in step %lld would make the host wait for a GPU)\n\n",
                static_cast<long long>(report.measured_step));
  } else {
    std::printf("host waits: %lld in step %lld over the simulated ranks (on a GPU the host would wait for the "
                "device's queue to drain at each; see the ranks below)\n\n",
                static_cast<long long>(host_waits), static_cast<long long>(report.measured_step));
  }
  std::printf("%-16s %9s %9s %9s %9s %9s %10s %10s  %s\n", "ranks", "params", "grads", "optim", "activ", "peak",
              "TFLOP", "recompute", "peak at");
  std::printf("%-16s %9s %9s %9s %9s %9s %10s %10s\n", "", "GiB", "GiB", "GiB", "GiB", "GiB", "", "TFLOP");
  std::map<int, const RankPlan*> by_rank;
  for (const RankPlan& rank : report.ranks) by_rank[rank.rank] = &rank;
  for (const auto& ranks : alike_ranks(report)) {
    const RankPlan& rank = *by_rank.at(ranks.front());
    std::vector<int> all;
    for (int simulated : ranks) all.insert(all.end(), by_rank.at(simulated)->stands_for.begin(), by_rank.at(simulated)->stands_for.end());
    std::sort(all.begin(), all.end());
    std::printf("%-16s %9s %9s %9s %9s %9s %10.3f %10.3f  %s\n", rank_ranges(all).c_str(),
                gib(rank.parameter_bytes).c_str(), gib(rank.gradient_bytes).c_str(), gib(rank.optimizer_bytes).c_str(),
                gib(rank.activation_bytes()).c_str(), gib(rank.peak_bytes).c_str(), rank.flops / 1e12,
                rank.recompute_flops / 1e12, rank.peak_at.c_str());
    std::printf("%-16s communication: %s\n", "", traffic_text(rank).c_str());
    std::printf("%-16s checkpoint: writes %s GiB of the model and optimizer state\n", "",
                gib(rank.checkpoint_bytes).c_str());
    if (rank.host_waits > 0) {
      std::printf("%-16s host waits: %lld, the first at: %s\n", "", static_cast<long long>(rank.host_waits),
                  rank.host_wait_sites.empty() ? "?" : rank.host_wait_sites.front().c_str());
    }
  }
}

nlohmann::json to_json(const std::string& config_path, const DryRunReport& report) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankPlan& rank : report.ranks) {
    nlohmann::json traffic = nlohmann::json::array();
    for (const auto& [key, total] : rank.traffic()) {
      traffic.push_back({{"dim", key.first}, {"op", key.second}, {"calls", total.calls}, {"bytes", total.bytes}});
    }
    nlohmann::json collectives = nlohmann::json::array();
    for (const auto& event : rank.collectives) {
      collectives.push_back({{"op", event.op}, {"group", event.group}, {"shapes", event.shapes},
                             {"dtype", event.dtype}, {"bytes", event.bytes}, {"call_site", event.call_site},
                             {"peer", event.peer}});
    }
    ranks.push_back({{"rank", rank.rank},
                     {"stands_for", rank.stands_for},
                     {"coordinates", rank.coordinates},
                     {"parameter_bytes", rank.parameter_bytes},
                     {"gradient_bytes", rank.gradient_bytes},
                     {"optimizer_bytes", rank.optimizer_bytes},
                     {"checkpoint_bytes", rank.checkpoint_bytes},
                     {"activation_bytes", rank.activation_bytes()},
                     {"peak_bytes", rank.peak_bytes},
                     {"peak_at", rank.peak_at},
                     {"flops", rank.flops},
                     {"recompute_flops", rank.recompute_flops},
                     {"traffic", traffic},
                     {"collectives", collectives},
                     {"host_waits", rank.host_waits},
                     {"host_wait_sites", rank.host_wait_sites}});
  }
  return {{"config", config_path},          {"world_size", report.world_size},
          {"measured_step", report.measured_step}, {"mesh", report.mesh},
          {"model", report.model},          {"parameters", report.parameters},
          {"tokens_per_step", report.tokens_per_step}, {"model_flops_per_step", report.model_flops_per_step},
          {"seconds", report.seconds},      {"ranks", ranks}};
}

// Takes `flag VALUE` out of args; "" when absent.
std::string take_value(Args& args, const std::string& flag) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] != flag) continue;
    if (i + 1 == args.size()) throw Error(flag + " needs a value\n" + std::string(kPlanUsage));
    std::string value = args[i + 1];
    args.erase(args.begin() + static_cast<long>(i), args.begin() + static_cast<long>(i) + 2);
    return value;
  }
  return "";
}

bool take_flag(Args& args, const std::string& flag) {
  auto it = std::find(args.begin(), args.end(), flag);
  if (it == args.end()) return false;
  args.erase(it);
  return true;
}

int positive(const std::string& flag, const std::string& text) {
  try {
    size_t used = 0;
    const int value = std::stoi(text, &used);
    if (used == text.size() && value >= 1) return value;
  } catch (const std::exception&) {
  }
  throw Error(flag + ": expected a whole number >= 1, got '" + text + "'");
}

}  // namespace

int plan_command(const Args& args) {
  if (std::find(args.begin(), args.end(), "--model") != args.end()) return plan_search_command(args);
  if (args.empty() || wants_help(args)) {
    std::cout << kPlanUsage;
    return args.empty() ? 2 : 0;
  }
  Args rest = args;
  const bool json = take_flag(rest, "--json");
  const bool every_rank = take_flag(rest, "--every-rank");
  const bool serial = take_flag(rest, "--serial");
  const std::string device_name = take_value(rest, "--device");
  std::optional<DeviceSpec> device;
  if (!device_name.empty()) device = find_device(device_name);
  const std::string world_text = take_value(rest, "--world-size");
  if (world_text.empty()) throw Error("titan plan CONFIG needs --world-size N (the ranks to simulate)\n" + std::string(kPlanUsage));
  DryRunOptions options;
  options.every_rank = every_rank;
  options.serial = serial;
  options.world_size = positive("--world-size", world_text);
  if (const std::string steps = take_value(rest, "--steps"); !steps.empty()) options.steps = positive("--steps", steps);
  RunArgs run = parse_run_args(rest, kPlanUsage);
  init_logging(0, run.log_level.empty() ? "error" : run.log_level);
  ConfigNode config = ConfigNode::load_file(run.config_path);
  for (const auto& assignment : run.overrides) config.apply_override(assignment);
  const DryRunReport report = dry_run(config, options);
  std::optional<StepEstimate> estimate;
  if (device) estimate = estimate_step(report, *device);
  if (json) {
    nlohmann::json out = to_json(run.config_path, report);
    if (estimate) {
      out["estimate"] = {{"device", device->name},       {"step_s", estimate->step_s},
                         {"compute_s", estimate->compute_s}, {"exposed_comm_s", estimate->exposed_comm_s},
                         {"bubble_s", estimate->bubble_s},   {"tokens_per_s", estimate->tokens_per_s},
                         {"mfu", estimate->mfu},             {"assumptions", estimate->assumptions}};
    }
    std::cout << out.dump(1) << "\n";
    return 0;
  }
  print_table(run.config_path, report);
  if (estimate) {
    std::printf("\non %s (%s), the slowest rank's step: %.2f s = compute %.2f + exposed communication %.2f + "
                "pipeline bubble %.2f; %.0f tokens/s for the job, MFU %.1f%%\nassumptions:\n",
                device->name.c_str(), device->description.c_str(), estimate->step_s, estimate->compute_s,
                estimate->exposed_comm_s, estimate->bubble_s, estimate->tokens_per_s, 100 * estimate->mfu);
    for (const auto& assumption : estimate->assumptions) std::printf("  - %s\n", assumption.c_str());
  }
  return 0;
}

}  // namespace titan::cli
