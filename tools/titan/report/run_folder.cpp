// Reading a run folder for the report: whole lines only, so a run still
// writing (or killed mid-write) is read up to its last complete line.
#include "report/run_folder.h"

#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "titan/error.hpp"

namespace fs = std::filesystem;

namespace titan::report {

namespace {

std::string read_whole(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read '" + path.string() + "' (check its permissions)");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// nlohmann's messages start with "[json.exception.parse_error.101] ".
std::string plain_message(const std::exception& error) {
  std::string message = error.what();
  if (message.rfind("[json.exception.", 0) == 0) {
    auto end = message.find("] ");
    if (end != std::string::npos) message = message.substr(end + 2);
  }
  return message;
}

std::string excerpt(const std::string& line) {
  constexpr size_t kMost = 80;
  return line.size() <= kMost ? line : line.substr(0, kMost) + "...";
}

void read_line(const std::string& line, int64_t number, MetricsFile& file) {
  auto where = [&] { return file.path + ":" + std::to_string(number) + ": "; };
  const std::string expected = "expected one JSON object with an integer \"step\" per line, as `titan train` writes";
  nlohmann::json record;
  try {
    record = nlohmann::json::parse(line);
  } catch (const nlohmann::json::parse_error& error) {
    throw Error(where() + expected + "; " + plain_message(error) + " in `" + excerpt(line) +
                "` (the file is damaged: remove or repair that line)");
  }
  if (!record.is_object()) throw Error(where() + expected + ", got `" + excerpt(line) + "`");
  auto step = record.find("step");
  if (step == record.end() || !step->is_number_integer()) {
    throw Error(where() + expected + "; this line has " +
                (step == record.end() ? std::string("no \"step\"") : "\"step\": " + step->dump()));
  }
  int64_t at = step->get<int64_t>();
  for (const auto& [key, value] : record.items()) {
    if (key == "step") continue;
    double number_value;
    if (value.is_number()) {
      number_value = value.get<double>();
    } else if (value.is_null()) {
      number_value = std::numeric_limits<double>::quiet_NaN();
    } else {
      file.non_numeric_keys.insert(key);
      continue;
    }
    Series& series = file.series[key];
    if (series.count(at)) file.relogged_steps.insert(at);
    series[at] = number_value;
  }
  ++file.lines;
}

std::string runs_below(const fs::path& folder) {
  std::string found;
  int count = 0;
  std::error_code ignored;
  for (const auto& entry : fs::directory_iterator(folder, ignored)) {
    if (!entry.is_directory(ignored) || !fs::exists(entry.path() / "metrics.jsonl", ignored)) continue;
    if (++count <= 5) found += (found.empty() ? "" : ", ") + entry.path().string();
  }
  if (count > 5) found += ", ...";
  return found;
}

}  // namespace

MetricsFile read_metrics_file(const std::string& path) {
  MetricsFile file;
  file.path = path;
  const std::string text = read_whole(path);
  size_t start = 0;
  int64_t number = 0;
  for (size_t end; (end = text.find('\n', start)) != std::string::npos; start = end + 1) {
    ++number;
    std::string line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    read_line(line, number, file);
  }
  file.partial_tail = text.substr(start);
  return file;
}

RunFolder read_run_folder(const std::string& path) {
  const fs::path folder(path);
  std::error_code ignored;
  if (!fs::is_directory(folder, ignored)) {
    throw Error("'" + path + "' is not a folder; expected a run folder (the job.dump_folder of a `titan train` run)");
  }
  const fs::path metrics = folder / "metrics.jsonl";
  if (!fs::exists(metrics, ignored)) {
    std::string message = "'" + path + "' is not a run folder: it has no metrics.jsonl. Expected the job.dump_folder " +
                          "of a `titan train` run with metrics.enable_jsonl: true (the default), where rank 0 writes " +
                          "metrics.jsonl and config.resolved.yaml";
    std::string runs = runs_below(folder);
    if (!runs.empty()) message += "; these folders inside it are runs: " + runs;
    throw Error(message);
  }
  RunFolder run;
  run.path = path;
  run.metrics = read_metrics_file(metrics.string());
  static const std::regex rank_file(R"(metrics\.rank([0-9]{1,6})\.jsonl)");
  for (const auto& entry : fs::directory_iterator(folder)) {
    std::smatch match;
    const std::string name = entry.path().filename().string();
    if (!std::regex_match(name, match, rank_file)) continue;
    int rank = std::stoi(match[1].str());
    if (rank >= 1) run.other_ranks[rank] = read_metrics_file(entry.path().string());
  }
  const fs::path config = folder / "config.resolved.yaml";
  if (fs::exists(config, ignored)) run.resolved_config = read_whole(config);
  return run;
}

}  // namespace titan::report
