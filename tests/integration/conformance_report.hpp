// Runs titan-conformance --json on a plugin and reads its report: the
// conformance tests' one way to ask which checks passed.
#pragma once
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace titan::test::conformance {

inline std::filesystem::path build_bin() { return std::filesystem::path(titan_binary()).parent_path(); }
inline std::filesystem::path plugin_dir() { return build_bin().parent_path() / "plugins"; }
inline std::filesystem::path test_plugin(const std::string& name) {
  return std::filesystem::path(paths::test_plugin_dir) / ("libtitan_plugin_" + name + ".so");
}

struct Report {
  int exit_code = 0;
  std::string output;
  std::map<std::string, std::string> results;  // check name -> pass / fail / skip
};

// Scratch folders of failing runs (kept for debugging) land in the build
// tree's test tmp dir, not in /tmp.
inline std::string with_scratch_in_test_tmp(const std::string& command) {
  auto dir = std::filesystem::path(env_or("TITAN_TEST_TMP", paths::test_tmp)) / "conformance_scratch";
  std::filesystem::create_directories(dir);
  return "TMPDIR=" + dir.string() + " " + command;
}

// titan-conformance with `args`, its table or JSON and its stderr merged
// (the binary is built beside titan; TITAN_CONFORMANCE overrides it).
inline CommandResult run_conformance(const std::string& args) {
  std::string binary = env_or("TITAN_CONFORMANCE", (build_bin() / "titan-conformance").string());
  return run_command(with_scratch_in_test_tmp(binary + " " + args));
}

inline Report conformance_json(const std::filesystem::path& plugin, const std::string& extra = "") {
  auto run = run_conformance("--json --plugin " + plugin.string() + " " + extra);
  Report report{run.exit_code, run.output, {}};
  if (run.exit_code == 0 || run.exit_code == 1) {
    // stderr (failure lines) follows the JSON document in the merged output.
    auto json = nlohmann::json::parse(run.output.substr(0, run.output.find("\nconformance check failed")));
    for (const auto& check : json["checks"]) report.results[check["name"]] = check["result"];
  }
  return report;
}

inline void check_all_pass(const Report& report, const std::vector<std::string>& names) {
  INFO(report.output);
  CHECK(report.exit_code == 0);
  for (const auto& name : names) {
    INFO(name);
    CHECK(report.results.count(name) == 1);
    if (report.results.count(name)) CHECK(report.results.at(name) == "pass");
  }
}

}  // namespace titan::test::conformance
