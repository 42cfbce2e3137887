// The flight recorder analysis rendered for people (text) and for scripts
// (JSON); separate from the command so the fuzz target of fr-analyze
// (tests/fuzz) links them without the rest of the CLI.
#include <nlohmann/json.hpp>

#include "fr_analysis.h"

namespace titan::cli::fr {

namespace {

std::string ranks_or_none(const std::vector<int>& ranks) {
  std::string text;
  for (size_t i = 0; i < ranks.size(); ++i) text += (i ? "," : "") + std::to_string(ranks[i]);
  return text.empty() ? "none" : text;
}

}  // namespace

std::string render_text(const Analysis& analysis) {
  std::string text = "flight recorder: world size " + std::to_string(analysis.world_size) + ", dumps from ranks " +
                     ranks_or_none(analysis.ranks_with_dumps) + ", missing ranks " +
                     ranks_or_none(analysis.missing_ranks) + "\n";
  for (const Dump& dump : analysis.dumps) {
    text += "  rank " + std::to_string(dump.rank) + ": " + dump.trigger + ": " + dump.reason + "\n";
  }
  if (analysis.findings.empty()) {
    text += std::string("no divergence found: every rank agrees on every collective still in the buffers") +
            (analysis.streams.empty() ? "" : ", and every send has its recv") + "\n";
  }
  for (size_t i = 0; i < analysis.findings.size(); ++i) {
    const Finding& finding = analysis.findings[i];
    text += (i == 0 ? "first divergence: " : "also: ") + finding.kind + ": " + finding.summary + "\n";
    for (const Variant& variant : finding.variants) {
      std::string who = variant.ranks.size() == 1 ? "rank " : "ranks ";
      text += "    " + (variant.ranks.empty() ? "" : who + ranks_or_none(variant.ranks) + ": ") +
              variant.description + "\n";
    }
  }
  if (!analysis.p2p.empty()) text += "send/recv, paired per stream (group, sender, receiver, tag):\n";
  for (const auto& line : analysis.p2p) text += "  " + line + "\n";
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
    if (finding.from >= 0) {  // send/recv: `sequence` is the op's number in its stream
      item["from"] = finding.from;
      item["to"] = finding.to;
      item["tag"] = finding.tag;
      item["stuck_ranks"] = finding.stuck_ranks;
    }
    findings.push_back(item);
  }
  nlohmann::json dumps = nlohmann::json::array();
  for (const Dump& dump : analysis.dumps) {
    dumps.push_back({{"rank", dump.rank}, {"path", dump.path}, {"trigger", dump.trigger}, {"reason", dump.reason}});
  }
  nlohmann::json streams = nlohmann::json::array();
  for (const P2pStream& stream : analysis.streams) {
    auto count = [](int64_t value) { return value < 0 ? nlohmann::json(nullptr) : nlohmann::json(value); };
    streams.push_back({{"group", stream.group},
                       {"group_ranks", stream.group_ranks},
                       {"from", stream.from},
                       {"to", stream.to},
                       {"tag", stream.tag},
                       {"sends", count(stream.sends)},
                       {"recvs", count(stream.recvs)},
                       {"matched", stream.matched},
                       {"status", stream.status}});
  }
  nlohmann::json out = {{"world_size", analysis.world_size},
                        {"ranks_with_dumps", analysis.ranks_with_dumps},
                        {"missing_ranks", analysis.missing_ranks},
                        {"dumps", dumps},
                        {"first_divergence", findings.empty() ? nlohmann::json(nullptr) : findings[0]},
                        {"findings", findings},
                        {"outstanding", analysis.waiting},
                        {"p2p", analysis.p2p},
                        {"p2p_streams", streams}};
  return out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace titan::cli::fr
