#include "worker.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>

#include "rank_group.h"
#include "titan/error.hpp"

namespace titan::conformance {

namespace {

std::map<std::string, WorkerFn>& workers() {
  static std::map<std::string, WorkerFn> all;
  return all;
}

int env_rank() {
  const char* rank = std::getenv("RANK");
  return rank ? std::atoi(rank) : 0;
}

// JSON has no infinity or NaN: nlohmann writes them as null. Either is a
// measurement no limit accepts, so null reads back as infinity.
double number_or_infinity(const nlohmann::json& value) {
  return value.is_null() ? std::numeric_limits<double>::infinity() : value.get<double>();
}

std::string results_path(const std::string& scratch, int rank) {
  return scratch + "/results-rank-" + std::to_string(rank) + ".json";
}

}  // namespace

const std::string& WorkerArgs::value(const std::string& key) const {
  auto found = values.find(key);
  if (found == values.end()) throw Error("conformance worker: missing --set " + key + "=...");
  return found->second;
}

void register_worker(const std::string& name, WorkerFn fn) { workers()[name] = std::move(fn); }

int run_worker_main(const std::string& name, const WorkerArgs& args) {
  auto found = workers().find(name);
  if (found == workers().end()) {
    std::cerr << "titan-conformance: unknown worker '" << name << "'\n";
    return 2;
  }
  CheckResults results = found->second(args);
  write_results(results_path(args.scratch, env_rank()), results);
  return 0;
}

void write_results(const std::string& path, const CheckResults& results) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : results) {
    rows.push_back({{"name", r.name}, {"passed", r.passed}, {"skipped", r.skipped}, {"measured", r.measured},
                    {"limit", r.limit}, {"detail", r.detail}});
  }
  std::string partial = path + ".partial";
  {
    std::ofstream out(partial);
    out << rows.dump(1) << "\n";
    if (!out) throw Error("cannot write conformance results '" + partial + "'");
  }
  std::filesystem::rename(partial, path);
}

CheckResults read_results(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("conformance worker wrote no results file '" + path + "'");
  nlohmann::json rows = nlohmann::json::parse(in);
  CheckResults results;
  for (const auto& row : rows) {
    results.push_back({row.at("name").get<std::string>(), row.at("passed").get<bool>(), row.at("skipped").get<bool>(),
                       number_or_infinity(row.at("measured")), number_or_infinity(row.at("limit")),
                       row.at("detail").get<std::string>()});
  }
  return results;
}

CheckResults run_workers(const WorkerRun& run) {
  std::vector<std::string> argv = {self_executable(), "--worker", run.worker, "--plugin", run.args.plugin,
                                   "--declare", run.args.declaration, "--scratch", run.args.scratch};
  for (const auto& [key, value] : run.args.values) {
    argv.push_back("--set");
    argv.push_back(key + "=" + value);
  }
  std::filesystem::create_directories(run.args.scratch);
  RankGroupOutcome outcome = run_rank_group(argv, run.ranks, run.args.scratch + "/logs", run.deadline);
  if (!outcome.ok) return {{run.row_on_failure, false, false, 0, 0, outcome.failure}};
  CheckResults merged;
  for (int rank = 0; rank < run.ranks; ++rank) {
    for (const auto& row : read_results(results_path(run.args.scratch, rank))) {
      auto same = std::find_if(merged.begin(), merged.end(), [&](const CheckResult& r) { return r.name == row.name; });
      if (same == merged.end()) {
        merged.push_back(row);
        if (!row.passed && !row.skipped && run.ranks > 1) merged.back().detail = "rank " + std::to_string(rank) + ": " + row.detail;
        continue;
      }
      same->measured = std::max(same->measured, row.measured);
      if (same->passed && !row.passed && !row.skipped) {
        same->passed = false;
        same->detail = "rank " + std::to_string(rank) + ": " + row.detail;
      }
    }
  }
  return merged;
}

}  // namespace titan::conformance
