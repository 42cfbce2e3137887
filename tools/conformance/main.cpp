// titan-conformance --plugin PATH [--declare FILE] [--ranks 1,2,4] [--json]
// Loads a plugin, runs the contract checks of each kind it declares against
// its conformance declaration (by default <PATH minus .so>.conformance.yaml,
// which titan_add_plugin(... CONFORMANCE file) puts beside the library),
// prints a table (or JSON), and exits 1 when any check fails, 2 on bad input.
// Multi-rank checks start this program again as workers (--worker).
#include <c10/util/Exception.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "check_result.h"
#include "kind_checks.h"
#include "worker.h"
#include "titan/plugin.hpp"
#include "titan/registry.hpp"

namespace {

using titan::conformance::CheckResult;
using titan::conformance::CheckResults;

const char* kUsage =
    "usage: titan-conformance --plugin PATH.so [--declare FILE.yaml] [--ranks 1,2,4] [--json] [--keep]\n"
    "  --ranks: the Gloo world sizes multi-rank kinds (parallelizer, checkpointer) are checked on\n"
    "           (a pipeline split: the stage counts it is asked for)\n"
    "  --keep:  keep the scratch folder (workers' logs, checkpoints) even when every check passes\n";

struct Args {
  std::string plugin, declaration, ranks = "1,2,4";
  bool json = false, keep = false;
  // Worker mode (internal): one rank of a multi-rank check.
  std::string worker, scratch;
  std::map<std::string, std::string> values;
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
    else if (arg == "--keep") args.keep = true;
    else if (arg == "--worker") args.worker = value();
    else if (arg == "--scratch") args.scratch = value();
    else if (arg == "--set") {
      std::string pair = value();
      auto eq = pair.find('=');
      if (eq == std::string::npos) throw titan::Error("--set needs key=value, got '" + pair + "'");
      args.values[pair.substr(0, eq)] = pair.substr(eq + 1);
    } else {
      throw titan::Error("unknown argument '" + arg + "'\n" + kUsage);
    }
  }
  if (args.plugin.empty()) throw titan::Error(std::string("--plugin is required\n") + kUsage);
  if (args.declaration.empty()) {
    std::string base = args.plugin;
    if (base.size() > 3 && base.compare(base.size() - 3, 3, ".so") == 0) base.resize(base.size() - 3);
    args.declaration = base + ".conformance.yaml";
  }
  return args;
}

std::vector<int> parse_ranks(const std::string& text) {
  std::vector<int> ranks;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    long value = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || value < 1 || value > 64) {
      throw titan::Error("--ranks: expected a comma-separated list of world sizes 1..64 (e.g. 1,2,4), got '" + text + "'");
    }
    ranks.push_back(static_cast<int>(value));
  }
  if (ranks.empty()) throw titan::Error("--ranks is empty; e.g. --ranks 1,2,4");
  return ranks;
}

std::string make_scratch() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/titan-conformance-XXXXXX";
  if (!mkdtemp(pattern.data())) throw titan::Error("cannot create a scratch folder '" + pattern + "'");
  return pattern;
}

void print_table(const std::string& plugin, const CheckResults& results) {
  std::printf("titan-conformance %s\n%-40s %-6s %-12s %-12s %s\n", plugin.c_str(), "check", "result", "measured",
              "limit", "detail");
  for (const auto& r : results) {
    const char* verdict = r.skipped ? "SKIP" : r.passed ? "PASS" : "FAIL";
    std::string detail = r.detail.substr(0, r.detail.find('\n'));  // the whole text goes to stderr on failure
    std::printf("%-40s %-6s %-12.3g %-12.3g %s\n", r.name.c_str(), verdict, r.measured, r.limit, detail.c_str());
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

int run_harness(const Args& args) {
  if (args.json) spdlog::set_level(spdlog::level::warn);  // plugins' info lines would break the JSON on stdout
  const titan::PluginInfo& info = titan::PluginRegistry::instance().load(args.plugin);
  titan::ConfigNode declaration = titan::ConfigNode::load_file(args.declaration);
  titan::conformance::KindCheckRequest request{args.plugin, args.declaration, declaration, parse_ranks(args.ranks),
                                               make_scratch()};
  CheckResults results;
  try {
    results = titan::conformance::run_kind_checks(request, info.kinds);
    declaration.check_unknown_keys();
  } catch (...) {
    std::filesystem::remove_all(request.scratch);  // bad input: nothing there worth keeping
    throw;
  }
  bool passed = std::none_of(results.begin(), results.end(), [](const CheckResult& r) { return !r.passed && !r.skipped; });
  if (args.json) print_json(info.name, results, passed);
  else print_table(info.name, results);
  if (!passed) {
    for (const auto& r : results) {
      if (!r.passed && !r.skipped) std::cerr << "conformance check failed: " << r.name << " (" << r.detail << ")\n";
    }
  }
  // Single-process kinds leave the scratch folder empty: nothing to point at.
  if ((passed && !args.keep) || std::filesystem::is_empty(request.scratch)) std::filesystem::remove_all(request.scratch);
  else std::cerr << "titan-conformance: workers' logs and files are in " << request.scratch << "\n";
  return passed ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Args args = parse_args(argc, argv);
    if (!args.worker.empty()) {
      titan::conformance::register_workers();
      return titan::conformance::run_worker_main(args.worker, {args.plugin, args.declaration, args.scratch, args.values});
    }
    return run_harness(args);
  } catch (const c10::Error& error) {
    // A plugin's LibTorch error: its message, not the frames (a worker's log
    // tail is what the failed row shows).
    std::cerr << "titan-conformance: " << error.what_without_backtrace() << "\n";
    return 2;
  } catch (const std::exception& error) {
    std::cerr << "titan-conformance: " << error.what() << "\n";
    return 2;
  }
}
