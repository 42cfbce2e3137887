// The run report's page; see html_report.h. The metric names are those
// step_metrics.cpp writes (TorchTitan's); keys it does not know are charted
// after the known ones, so new metrics (MoE routers, ...) show up unasked.
#include "report/html_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>
#include <sstream>

#include "report/svg_chart.h"

namespace titan::report {

namespace {

constexpr int kChartWidth = 560;
// Up to this many ranks a per-rank metric is one line per rank; above, a
// min-max band with rank 0's line.
constexpr size_t kMostRankLines = 4;

struct Metric {
  const char* key;
  const char* label;
  bool per_rank = false;  // differs between ranks: spread drawn when every rank saved its metrics
};

struct ChartSpec {
  const char* id;
  const char* title;
  const char* unit;
  std::vector<Metric> metrics;
};

const std::vector<ChartSpec>& chart_specs() {
  static const std::vector<ChartSpec> specs = {
      {"loss", "Loss", "loss",
       {{"loss_metrics/global_avg_loss", "training, global average"},
        {"loss_metrics/global_max_loss", "training, global max"},
        {"validation_metrics/loss", "validation"}}},
      {"grad_norm", "Gradient norm", "", {{"grad_norm", "grad norm"}}},
      {"throughput", "Tokens/s per device", "tokens/s", {{"throughput(tps)", "tokens/s", true}}},
      {"mfu", "MFU", "%", {{"mfu(%)", "MFU"}}},
      {"memory", "Memory", "GiB",
       {{"memory/max_active(GiB)", "max active", true},
        {"memory/max_reserved(GiB)", "max reserved", true},
        {"memory/state(GiB)", "params + grads + optimizer state"}}},
      {"data_loading", "Data loading", "% of step time", {{"time_metrics/data_loading(%)", "data loading", true}}},
      {"step_time", "Step time", "s",
       {{"time_metrics/end_to_end(s)", "end to end"}, {"time_metrics/data_loading(s)", "data loading"}}},
      {"lr", "Learning rate", "", {{"lr", "lr"}}},
      {"tflops", "TFLOPs per device", "TFLOP/s", {{"tflops", "TFLOPs"}}},
      {"memory_percent", "Memory, % of the device", "%",
       {{"memory/max_active(%)", "max active"}, {"memory/max_reserved(%)", "max reserved"}}},
      {"memory_events", "Allocator retries and OOMs", "count",
       {{"memory/num_alloc_retries", "alloc retries"}, {"memory/num_ooms", "OOMs"}}},
      {"validation_throughput", "Validation tokens/s", "tokens/s", {{"validation_metrics/tps", "tokens/s"}}},
      {"tokens_seen", "Tokens seen", "tokens", {{"n_tokens_seen", "tokens seen"}}},
  };
  return specs;
}

// Shown in the summary, not charted.
const char* const kElapsed = "time_metrics/elapsed(s)";
// The batches of a validation pass: the same every pass, not worth a chart.
const char* const kValidationBatches = "validation_metrics/batches";

const Series* find_series(const MetricsFile& file, const std::string& key) {
  auto it = file.series.find(key);
  return it == file.series.end() ? nullptr : &it->second;
}

// The lines (and band) of one metric: rank 0's, or every rank's.
void add_metric(Chart& chart, const RunFolder& run, const Metric& metric, int& next_colour) {
  const Series* rank0 = find_series(run.metrics, metric.key);
  std::map<int, const Series*> ranks;
  if (rank0) ranks[0] = rank0;
  if (metric.per_rank) {
    for (const auto& [rank, file] : run.other_ranks) {
      if (const Series* series = find_series(file, metric.key)) ranks[rank] = series;
    }
  }
  if (ranks.empty()) return;
  if (run.other_ranks.empty() || !metric.per_rank) {
    chart.lines.push_back({metric.label, *ranks.begin()->second, next_colour++});
    return;
  }
  if (ranks.size() <= kMostRankLines) {
    for (const auto& [rank, series] : ranks) {
      chart.lines.push_back({std::string(metric.label) + ", rank " + std::to_string(rank), *series, next_colour++});
    }
    return;
  }
  ChartBand band{std::string(metric.label) + ", min-max of " + std::to_string(ranks.size()) + " ranks", {}, {},
                 next_colour};
  for (const auto& [rank, series] : ranks) {
    for (const auto& [step, value] : *series) {
      if (!std::isfinite(value)) continue;
      auto low = band.low.emplace(step, value).first;
      auto high = band.high.emplace(step, value).first;
      low->second = std::min(low->second, value);
      high->second = std::max(high->second, value);
    }
  }
  chart.bands.push_back(band);
  if (rank0) chart.lines.push_back({std::string(metric.label) + ", rank 0", *rank0, next_colour});
  ++next_colour;
}

// Keys no spec names, grouped so that keys differing only in a middle part
// (moe/<router>/imbalance) share a chart with one line each.
std::vector<Chart> other_charts(const MetricsFile& metrics, const std::set<std::string>& known) {
  std::map<std::string, Chart> groups;
  for (const auto& [key, series] : metrics.series) {
    if (known.count(key)) continue;
    std::string group = key, label = key;
    auto first = key.find('/'), last = key.rfind('/');
    if (first != std::string::npos && last != first) {
      group = key.substr(0, first) + "/*" + key.substr(last);
      label = key.substr(first + 1, last - first - 1);
    }
    Chart& chart = groups[group];
    chart.title = group;
    chart.lines.push_back({label, series});
  }
  std::vector<Chart> charts;
  for (auto& [group, chart] : groups) {
    chart.id = "other-" + std::to_string(charts.size() + 1);
    charts.push_back(std::move(chart));
  }
  return charts;
}

std::string duration(double seconds) {
  char text[64];
  if (!std::isfinite(seconds)) return "unknown";
  if (seconds < 60) {
    std::snprintf(text, sizeof(text), "%.1f s", seconds);
  } else if (seconds < 3600) {
    std::snprintf(text, sizeof(text), "%d min %02d s", int(seconds / 60), int(seconds) % 60);
  } else {
    std::snprintf(text, sizeof(text), "%d h %02d min", int(seconds / 3600), int(seconds / 60) % 60);
  }
  return text;
}

std::string file_name(const std::string& path) { return std::filesystem::path(path).filename().string(); }

void file_notes(const MetricsFile& file, std::vector<std::string>& notes) {
  const std::string name = file_name(file.path);
  if (!file.partial_tail.empty()) {
    notes.push_back(name + " ends in an incomplete line (" + std::to_string(file.partial_tail.size()) +
                    " bytes: the run is still writing it, or stopped mid-write); it is left out");
  }
  if (!file.relogged_steps.empty()) {
    notes.push_back(name + ": " + std::to_string(file.relogged_steps.size()) + " steps (" +
                    std::to_string(*file.relogged_steps.begin()) + " to " +
                    std::to_string(*file.relogged_steps.rbegin()) +
                    ") were logged more than once (a resumed run appends); the last values are shown");
  }
  if (!file.non_numeric_keys.empty()) {
    std::string keys;
    for (const auto& key : file.non_numeric_keys) keys += (keys.empty() ? "" : ", ") + key;
    notes.push_back(name + ": keys without numbers, not charted: " + keys);
  }
}

struct Summary {
  std::vector<std::pair<std::string, std::string>> items;
  void add(const std::string& name, const std::string& value) { items.emplace_back(name, value); }
};

// The last value of a key (rank 0), if logged.
const double* last_value(const RunFolder& run, const char* key) {
  const Series* series = find_series(run.metrics, key);
  return series && !series->empty() ? &series->rbegin()->second : nullptr;
}

Summary summarize(const RunFolder& run, int64_t last_step) {
  Summary summary;
  summary.add("steps", last_step < 0 ? "none yet" : std::to_string(last_step));
  if (const double* loss = last_value(run, "loss_metrics/global_avg_loss")) summary.add("last loss", format_number(*loss));
  if (const double* loss = last_value(run, "validation_metrics/loss")) {
    summary.add("last validation loss", format_number(*loss));
  }
  if (const double* tps = last_value(run, "throughput(tps)")) summary.add("final tokens/s per device", format_number(*tps));
  if (const double* mfu = last_value(run, "mfu(%)")) summary.add("final MFU", format_number(*mfu) + " %");
  if (const double* elapsed = last_value(run, kElapsed)) summary.add("wall time", duration(*elapsed));
  summary.add("ranks with metrics", run.other_ranks.empty() ? "rank 0" : std::to_string(1 + run.other_ranks.size()));
  return summary;
}

const char* kStyle = R"(
body { font-family: sans-serif; margin: 16px auto; max-width: 1180px; color: #222; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 24px 0 8px; }
.path { color: #666; margin: 0 0 12px; font-family: monospace; }
.summary { display: flex; flex-wrap: wrap; gap: 8px; margin: 0; }
.summary div { border: 1px solid #ddd; border-radius: 4px; padding: 6px 12px; background: #fafafa; }
.summary dt { font-size: 11px; color: #666; }
.summary dd { margin: 0; font-size: 18px; font-weight: bold; }
.notes { color: #8a5a00; }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(570px, 1fr)); gap: 8px; }
figure { margin: 0; border: 1px solid #ddd; border-radius: 4px; }
pre { background: #f6f6f6; border: 1px solid #ddd; padding: 8px; overflow-x: auto; font-size: 12px; }
)";

}  // namespace

Report build_report(const RunFolder& run) {
  Report report;
  std::vector<Chart> charts;
  std::set<std::string> known = {kElapsed, kValidationBatches};
  std::vector<std::string> missing;
  for (const auto& spec : chart_specs()) {
    Chart chart{spec.id, spec.title, spec.unit, {}, {}};
    int next_colour = 0;
    for (const auto& metric : spec.metrics) {
      known.insert(metric.key);
      size_t before = chart.lines.size();
      add_metric(chart, run, metric, next_colour);
      if (chart.lines.size() == before) missing.push_back(metric.key);
    }
    if (!chart.lines.empty()) charts.push_back(std::move(chart));
  }
  for (auto& chart : other_charts(run.metrics, known)) charts.push_back(std::move(chart));

  for (const auto& [key, series] : run.metrics.series) {
    if (!series.empty()) report.last_step = std::max(report.last_step, series.rbegin()->first);
  }
  if (run.metrics.lines == 0) report.notes.push_back("metrics.jsonl has no complete line yet (the run may have just started)");
  file_notes(run.metrics, report.notes);
  for (const auto& [rank, file] : run.other_ranks) file_notes(file, report.notes);
  if (!run.resolved_config) report.notes.push_back("no config.resolved.yaml in the folder (rank 0 writes it at the start)");
  if (run.metrics.lines > 0 && !missing.empty()) {
    std::string keys;
    for (const auto& key : missing) keys += (keys.empty() ? "" : ", ") + key;
    report.notes.push_back("not in this run's metrics: " + keys);
  }

  auto folder = std::filesystem::path(run.path).lexically_normal();
  if (!folder.has_filename()) folder = folder.parent_path();  // "out/run/"
  const std::string name = folder.filename().string();
  std::ostringstream html;
  html << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
       << "<meta name=\"generator\" content=\"titan report\">\n<title>Titan run report: " << escape_html(name)
       << "</title>\n<style>" << kStyle << "</style>\n</head>\n<body>\n<header>\n<h1>Titan run report</h1>\n"
       << "<p class=\"path\">" << escape_html(run.path) << "</p>\n<dl class=\"summary\">\n";
  for (const auto& [item, value] : summarize(run, report.last_step).items) {
    html << "<div><dt>" << escape_html(item) << "</dt><dd>" << escape_html(value) << "</dd></div>\n";
  }
  html << "</dl>\n";
  if (!report.notes.empty()) {
    html << "<ul class=\"notes\">\n";
    for (const auto& note : report.notes) html << "<li>" << escape_html(note) << "</li>\n";
    html << "</ul>\n";
  }
  html << "</header>\n<main class=\"charts\">\n";
  for (const auto& chart : charts) {
    html << "<figure id=\"chart-" << escape_html(chart.id) << "\">" << render_svg(chart, kChartWidth) << "</figure>\n";
    report.chart_ids.push_back(chart.id);
  }
  html << "</main>\n<section>\n<h2>Resolved config (config.resolved.yaml)</h2>\n<pre>"
       << escape_html(run.resolved_config.value_or("(not found)")) << "</pre>\n</section>\n</body>\n</html>\n";
  report.html = html.str();
  return report;
}

}  // namespace titan::report
