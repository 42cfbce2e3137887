// What `titan train` leaves in a run folder (job.dump_folder), read for the
// run report: metrics.jsonl, each other rank's metrics.rank<r>.jsonl and
// config.resolved.yaml. Changes when the files a run writes change.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>

namespace titan::report {

// One metric over steps. A step logged twice (a resumed run appends to the
// same file) keeps its last value; NaN where the line held null (JSON has
// no NaN, so a NaN loss is written as null).
using Series = std::map<int64_t, double>;

struct MetricsFile {
  std::string path;
  std::map<std::string, Series> series;  // every numeric key of every line, "step" aside
  std::set<std::string> non_numeric_keys;  // keys whose values are not numbers (listed, not charted)
  int64_t lines = 0;  // whole lines read
  std::set<int64_t> relogged_steps;  // steps a later line logged again (a resumed run)
  // Bytes after the last newline: a run still writing or killed mid-line.
  // Not read; the report says so.
  std::string partial_tail;
};

// Reads a metrics file up to its last whole line. A whole line that is not
// a JSON object with an integer "step" is an Error naming path:line.
MetricsFile read_metrics_file(const std::string& path);

struct RunFolder {
  std::string path;
  MetricsFile metrics;  // rank 0's metrics.jsonl
  std::map<int, MetricsFile> other_ranks;  // metrics.rank<r>.jsonl, r >= 1 (metrics.save_for_all_ranks)
  std::optional<std::string> resolved_config;  // config.resolved.yaml's text, when present
};

// Reads a run folder. A folder without metrics.jsonl is an Error saying what
// a run folder holds (and naming subfolders that are runs, if any).
RunFolder read_run_folder(const std::string& path);

}  // namespace titan::report
