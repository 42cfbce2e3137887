// `titan fr-analyze DIR [--json]`: the flight recorder analyzer's command
// line and its two renderings (text for people, JSON for scripts).
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "fr_analysis.h"
#include "titan/error.hpp"

namespace titan::cli {

namespace {

const char* kUsage =
    "usage: titan fr-analyze DIR [--json]\n"
    "  Reads every rank's flight recorder dump (DIR/flight_recorder/rank_*.json, or DIR/rank_*.json)\n"
    "  and reports the first divergence: ranks without a dump (dead), ranks that never entered a\n"
    "  collective the others wait in, and mismatched ops, sizes or call sites for one sequence id\n"
    "  of a process group. --json prints the same as one JSON object. Exit status 0 when the dumps\n"
    "  were read (whatever they show), 1 on unreadable input.\n";

std::string ranks_text(const std::vector<int>& ranks) {
  std::string text;
  for (size_t i = 0; i < ranks.size(); ++i) text += (i ? "," : "") + std::to_string(ranks[i]);
  return text.empty() ? "none" : text;
}

}  // namespace

namespace fr {

std::string render_text(const Analysis& analysis) {
  std::string text = "flight recorder: world size " + std::to_string(analysis.world_size) + ", dumps from ranks " +
                     ranks_text(analysis.ranks_with_dumps) + ", missing ranks " +
                     ranks_text(analysis.missing_ranks) + "\n";
  for (const Dump& dump : analysis.dumps) {
    text += "  rank " + std::to_string(dump.rank) + ": " + dump.trigger + ": " + dump.reason + "\n";
  }
  if (analysis.findings.empty()) {
    text += "no divergence found: every rank agrees on every collective still in the buffers\n";
  }
  for (size_t i = 0; i < analysis.findings.size(); ++i) {
    const Finding& finding = analysis.findings[i];
    text += (i == 0 ? "first divergence: " : "also: ") + finding.kind + ": " + finding.summary + "\n";
    for (const Variant& variant : finding.variants) {
      std::string who = variant.ranks.size() == 1 ? "rank " : "ranks ";
      text += "    " + (variant.ranks.empty() ? "" : who + ranks_text(variant.ranks) + ": ") +
              variant.description + "\n";
    }
  }
  if (!analysis.waiting.empty()) text += "outstanding at dump time:\n";
  for (const auto& line : analysis.waiting) text += "  " + line + "\n";
  return text;
}

std::string render_json(const Analysis& analysis) {
  nlohmann::json findings = nlohmann::json::array();
  for (const Finding& finding : analysis.findings) {
    nlohmann::json variants = nlohmann::json::array();
    for (const Variant& variant : finding.variants) {
      variants.push_back({{"ranks", variant.ranks}, {"description", variant.description}});
    }
    nlohmann::json item = {{"kind", finding.kind},       {"summary", finding.summary},
                           {"faulty_ranks", finding.faulty_ranks}, {"variants", variants}};
    if (finding.kind != "missing_rank") {
      item["group"] = finding.group;
      item["group_ranks"] = finding.group_ranks;
      item["sequence"] = finding.sequence;
      item["op"] = finding.op;
    }
    findings.push_back(item);
  }
  nlohmann::json dumps = nlohmann::json::array();
  for (const Dump& dump : analysis.dumps) {
    dumps.push_back({{"rank", dump.rank}, {"path", dump.path}, {"trigger", dump.trigger}, {"reason", dump.reason}});
  }
  nlohmann::json out = {{"world_size", analysis.world_size},
                        {"ranks_with_dumps", analysis.ranks_with_dumps},
                        {"missing_ranks", analysis.missing_ranks},
                        {"dumps", dumps},
                        {"first_divergence", findings.empty() ? nlohmann::json(nullptr) : findings[0]},
                        {"findings", findings},
                        {"outstanding", analysis.waiting}};
  return out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace fr

int fr_analyze_command(const Args& args) {
  if (wants_help(args)) {
    std::cout << kUsage;
    return 0;
  }
  std::string dir;
  bool json = false;
  for (const auto& arg : args) {
    if (arg == "--json") {
      json = true;
    } else if (!arg.empty() && arg[0] == '-') {
      throw Error("fr-analyze: unknown option '" + arg + "'\n" + kUsage);
    } else if (dir.empty()) {
      dir = arg;
    } else {
      throw Error("fr-analyze: one folder expected, got '" + dir + "' and '" + arg + "'\n" + kUsage);
    }
  }
  if (dir.empty()) throw Error(std::string("fr-analyze: no folder given\n") + kUsage);
  fr::Analysis analysis = fr::analyze(fr::load_dumps(dir));
  std::cout << (json ? fr::render_json(analysis) : fr::render_text(analysis));
  return 0;
}

}  // namespace titan::cli
