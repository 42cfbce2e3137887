// `titan fr-analyze DIR [--json]`: the flight recorder analyzer's command
// line; the renderings are in fr_render.cpp.
#include <iostream>

#include "commands.h"
#include "fr_analysis.h"
#include "titan/error.hpp"

namespace titan::cli {

namespace {

const char* kFrAnalyzeUsage =
    "usage: titan fr-analyze DIR [--json]\n"
    "  Reads every rank's flight recorder dump (DIR/flight_recorder/rank_*.json, or DIR/rank_*.json)\n"
    "  and reports the first divergence: ranks without a dump (dead), ranks that never entered a\n"
    "  collective the others wait in, and mismatched ops, sizes or call sites for one sequence id\n"
    "  of a process group. Sends and recvs are paired per stream (group, sender, receiver, tag):\n"
    "  the n-th send of rank A to rank B matches the n-th recv of B from A; a recv nobody sent, a\n"
    "  send nobody received and the rank stuck in it are named. --json prints the same as one JSON\n"
    "  object. Exit status 0 when the dumps were read (whatever they show), 1 on unreadable input.\n";

}  // namespace

int fr_analyze_command(const Args& args) {
  if (wants_help(args)) {
    std::cout << kFrAnalyzeUsage;
    return 0;
  }
  std::string dir;
  bool json = false;
  for (const auto& arg : args) {
    if (arg == "--json") {
      json = true;
    } else if (!arg.empty() && arg[0] == '-') {
      throw Error("fr-analyze: unknown option '" + arg + "'\n" + kFrAnalyzeUsage);
    } else if (dir.empty()) {
      dir = arg;
    } else {
      throw Error("fr-analyze: one folder expected, got '" + dir + "' and '" + arg + "'\n" + kFrAnalyzeUsage);
    }
  }
  if (dir.empty()) throw Error(std::string("fr-analyze: no folder given\n") + kFrAnalyzeUsage);
  fr::Analysis analysis = fr::analyze(fr::load_dumps(dir));
  std::cout << (json ? fr::render_json(analysis) : fr::render_text(analysis));
  return 0;
}

}  // namespace titan::cli
