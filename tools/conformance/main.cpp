// titan-conformance --plugin PATH [--declare FILE] [--ranks 1,2,4] [--json]
// Loads a plugin, runs the contract checks of each kind it declares against
// its conformance declaration (by default <PATH minus .so>.conformance.yaml,
// which titan_add_plugin(... CONFORMANCE file) puts beside the library),
// prints a table (or JSON), and exits 1 when any check fails, 2 on bad input.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "check_result.h"
#include "optimizer_checks.h"
#include "titan/plugin.hpp"
#include "titan/registry.hpp"

namespace {

using titan::conformance::CheckResult;
using titan::conformance::CheckResults;

const char* kUsage =
    "usage: titan-conformance --plugin PATH.so [--declare FILE.yaml] [--ranks 1,2,4] [--json]\n"
    "  --ranks: for multi-rank kinds (parallelizer, checkpointer), which have no checks yet\n";

struct Args {
  std::string plugin, declaration, ranks = "1";
  bool json = false;
};

Args parse_args(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw titan::Error(arg + " needs a value\n" + kUsage);
      return argv[++i];
    };
    if (arg == "--plugin") args.plugin = value();
    else if (arg == "--declare") args.declaration = value();
    else if (arg == "--ranks") args.ranks = value();
    else if (arg == "--json") args.json = true;
    else throw titan::Error("unknown argument '" + arg + "'\n" + kUsage);
  }
  if (args.plugin.empty()) throw titan::Error(std::string("--plugin is required\n") + kUsage);
  if (args.declaration.empty()) {
    std::string base = args.plugin;
    if (base.size() > 3 && base.compare(base.size() - 3, 3, ".so") == 0) base.resize(base.size() - 3);
    args.declaration = base + ".conformance.yaml";
  }
  return args;
}

CheckResults run_checks(const Args& args, uint32_t kinds, const titan::ConfigNode& declaration) {
  CheckResults results;
  if (kinds & titan::kind_optimizer) {
    if (!declaration.has("optimizer")) {
      results.push_back({"optimizer.declaration", false, false, 0, 0,
                         args.declaration + ": no 'optimizer:' section (rule, options, tolerance)"});
    } else {
      auto checks = titan::conformance::check_optimizer(args.plugin, declaration.child("optimizer"));
      results.insert(results.end(), checks.begin(), checks.end());
    }
  }
  // Kinds without checks yet are listed, so a pass is never claimed for them.
  uint32_t unchecked = kinds & ~static_cast<uint32_t>(titan::kind_optimizer);
  for (uint32_t bit = 1; bit != 0 && bit <= unchecked; bit <<= 1) {
    if (unchecked & bit) {
      results.push_back({titan::kinds_to_string(bit), false, true, 0, 0, "no conformance checks for this kind yet"});
    }
  }
  return results;
}

void print_table(const std::string& plugin, const CheckResults& results) {
  std::printf("titan-conformance %s\n%-32s %-6s %-12s %-12s %s\n", plugin.c_str(), "check", "result", "measured",
              "limit", "detail");
  for (const auto& r : results) {
    const char* verdict = r.skipped ? "SKIP" : r.passed ? "PASS" : "FAIL";
    std::printf("%-32s %-6s %-12.3g %-12.3g %s\n", r.name.c_str(), verdict, r.measured, r.limit, r.detail.c_str());
  }
}

void print_json(const std::string& plugin, const CheckResults& results, bool passed) {
  nlohmann::json out = {{"plugin", plugin}, {"passed", passed}, {"checks", nlohmann::json::array()}};
  for (const auto& r : results) {
    out["checks"].push_back({{"name", r.name}, {"result", r.skipped ? "skip" : r.passed ? "pass" : "fail"},
                             {"measured", r.measured}, {"limit", r.limit}, {"detail", r.detail}});
  }
  std::cout << out.dump(2) << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Args args = parse_args(argc, argv);
    if (args.json) spdlog::set_level(spdlog::level::warn);  // plugins' info lines would break the JSON on stdout
    const titan::PluginInfo& info = titan::PluginRegistry::instance().load(args.plugin);
    titan::ConfigNode declaration = titan::ConfigNode::load_file(args.declaration);
    CheckResults results = run_checks(args, info.kinds, declaration);
    declaration.check_unknown_keys();
    bool passed = std::none_of(results.begin(), results.end(), [](const CheckResult& r) { return !r.passed && !r.skipped; });
    if (args.json) print_json(info.name, results, passed);
    else print_table(info.name, results);
    if (!passed) {
      for (const auto& r : results) {
        if (!r.passed && !r.skipped) std::cerr << "conformance check failed: " << r.name << " (" << r.detail << ")\n";
      }
    }
    return passed ? 0 : 1;
  } catch (const std::exception& error) {
    std::cerr << "titan-conformance: " << error.what() << "\n";
    return 2;
  }
}
