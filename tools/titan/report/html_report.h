// The run report: one self-contained HTML page (no scripts, no network)
// with the run's summary, notes on what was read, a chart per group of
// metrics over steps (per-rank spread where every rank saved its metrics)
// and the resolved config. Changes with what the report shows.
#pragma once
#include <string>
#include <vector>

#include "report/run_folder.h"

namespace titan::report {

struct Report {
  std::string html;
  std::vector<std::string> chart_ids;  // in page order
  std::vector<std::string> notes;  // also on the page: partial lines, relogged steps, missing files
  int64_t last_step = -1;  // -1: no complete line yet
};

Report build_report(const RunFolder& run);

}  // namespace titan::report
