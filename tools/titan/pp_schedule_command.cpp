// `titan pp-schedule`: a pipeline schedule's per-rank actions, after the
// static check, with its theoretical bubble and an optional SVG timeline.
#include <fstream>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>

#include "commands.h"
#include "titan/error.hpp"
#include "titan/pipeline_program.hpp"
#include "titan/registry.hpp"

namespace titan::cli {

namespace {

const char* kPpScheduleUsage =
    "usage: titan pp-schedule --schedule NAME --stages S --microbatches M [--ranks PP] [--svg FILE] [--comm]\n"
    "       titan pp-schedule --csv FILE [--stages S] [--microbatches M] [--ranks PP] [--svg FILE] [--comm]\n"
    "  Builds the schedule's per-rank action lists, runs the static check (matched sends, no deadlock,\n"
    "  every forward and backward once) and prints the lists (PyTorch's table: one column per rank),\n"
    "  the theoretical bubble fraction (F = I = W = 1 tick, B = 2) and, with --svg, a timeline.\n"
    "  --schedule   GPipe, 1F1B, Interleaved1F1B, LoopedBFS, InterleavedZeroBubble, ZBVZeroBubble, DualPipeV\n"
    "               (case-insensitive), or a schedule of a plugin given with --plugin NAME|PATH.so\n"
    "  --ranks      pipeline_parallel_degree (default: stages / the schedule's least stages per rank)\n"
    "  --csv        a schedule in PyTorch's CSV format (one row per rank; compute-only or with comm)\n"
    "  --comm       print the lowered lists with SEND_F/RECV_F/SEND_B/RECV_B (default: compute only)\n";

struct PpScheduleOptions {
  std::string schedule, csv, svg;
  std::vector<std::string> plugins;
  std::optional<int64_t> stages, microbatches, ranks;
  bool comm = false;
};

int64_t positive_count(const std::string& flag, const std::string& text) {
  size_t used = 0;
  int64_t value = -1;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
  }
  if (used != text.size() || value < 1) throw Error(flag + ": expected a positive integer, got '" + text + "'");
  return value;
}

PpScheduleOptions parse_pp_schedule(const Args& args) {
  PpScheduleOptions options;
  for (size_t i = 0; i < args.size(); ++i) {
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) throw Error(args[i] + " needs a value\n" + kPpScheduleUsage);
      return args[++i];
    };
    const std::string& flag = args[i];
    if (flag == "--schedule") options.schedule = value();
    else if (flag == "--csv") options.csv = value();
    else if (flag == "--svg") options.svg = value();
    else if (flag == "--plugin") options.plugins.push_back(value());
    else if (flag == "--stages") options.stages = positive_count(flag, value());
    else if (flag == "--microbatches") options.microbatches = positive_count(flag, value());
    else if (flag == "--ranks") options.ranks = positive_count(flag, value());
    else if (flag == "--comm") options.comm = true;
    else throw Error("unknown option '" + flag + "'\n" + kPpScheduleUsage);
  }
  if (options.schedule.empty() == options.csv.empty()) {
    throw Error(std::string("give one of --schedule NAME or --csv FILE\n") + kPpScheduleUsage);
  }
  return options;
}

PipelineProgram program_from(const PpScheduleOptions& options) {
  if (!options.csv.empty()) {
    CsvSchedule csv = read_schedule_csv(options.csv);
    PipelineShape shape = csv.shape;
    if (options.ranks) shape.ranks = *options.ranks;
    if (options.stages) shape.stages = *options.stages;
    if (options.microbatches) shape.microbatches = *options.microbatches;
    return compile_pipeline_csv(csv, shape);
  }
  auto& registry = PluginRegistry::instance();
  for (const auto& plugin : options.plugins) registry.load(plugin);
  PluginContext context;
  context.options = ConfigNode::parse("{}", "<pp-schedule>");
  auto schedule = registry.create_pipeline_schedule(options.schedule, context);
  if (!options.microbatches) throw Error(std::string("--microbatches is required with --schedule\n") + kPpScheduleUsage);
  if (!options.stages && !options.ranks) throw Error(std::string("give --stages (or --ranks)\n") + kPpScheduleUsage);
  const int64_t least = schedule->stages_per_rank().min;
  PipelineShape shape;
  shape.microbatches = *options.microbatches;
  shape.stages = options.stages ? *options.stages : *options.ranks * least;
  shape.ranks = options.ranks ? *options.ranks : std::max<int64_t>(1, shape.stages / least);
  return compile_pipeline(*schedule, shape);
}

const char* colour_of(ActionType type) {
  switch (type) {
    case ActionType::forward: return "#4e79a7";
    case ActionType::backward_input: return "#f28e2b";
    case ActionType::backward_weight: return "#b07aa1";
    case ActionType::full_backward: return "#59a14f";
    default: return "#bab0ac";
  }
}

// One row per rank, one box per compute action at its simulated ticks.
std::string timeline_svg(const PipelineProgram& program) {
  const int tick = 28, row = 30, left = 70, top = 34;
  const int64_t width = left + program.timeline.makespan * tick + 20;
  const int64_t height = top + static_cast<int64_t>(program.timeline.ranks.size()) * row + 40;
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" font-family=\"monospace\" font-size=\"11\">\n"
      << "<title>" << program.name << ": " << program.shape.to_string() << "</title>\n"
      << "<text x=\"4\" y=\"16\">" << program.name << ": " << program.shape.to_string() << ", bubble " << std::fixed
      << std::setprecision(4) << program.timeline.bubble_fraction << "</text>\n";
  for (size_t r = 0; r < program.timeline.ranks.size(); ++r) {
    const int64_t y = top + static_cast<int64_t>(r) * row;
    svg << "<text x=\"4\" y=\"" << y + 18 << "\">rank " << r << "</text>\n";
    for (const TimedAction& timed : program.timeline.ranks[r]) {
      if (!is_compute(timed.action.type)) continue;
      const int64_t x = left + timed.start * tick;
      const int64_t w = (timed.end - timed.start) * tick;
      svg << "<g><title>" << timed.action.to_string() << " ticks " << timed.start << "-" << timed.end << "</title>"
          << "<rect class=\"" << action_type_code(timed.action.type) << "\" x=\"" << x << "\" y=\"" << y
          << "\" width=\"" << w - 1 << "\" height=\"" << row - 4 << "\" fill=\"" << colour_of(timed.action.type)
          << "\"/><text x=\"" << x + 3 << "\" y=\"" << y + 17 << "\" fill=\"white\">" << timed.action.to_string()
          << "</text></g>\n";
    }
  }
  const int64_t legend = top + static_cast<int64_t>(program.timeline.ranks.size()) * row + 12;
  int64_t x = left;
  for (ActionType type : {ActionType::forward, ActionType::full_backward, ActionType::backward_input,
                          ActionType::backward_weight}) {
    svg << "<rect x=\"" << x << "\" y=\"" << legend << "\" width=\"14\" height=\"14\" fill=\"" << colour_of(type)
        << "\"/><text x=\"" << x + 18 << "\" y=\"" << legend + 11 << "\">" << action_type_code(type) << "</text>\n";
    x += 50;
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace

int pp_schedule_command(const Args& args) {
  if (args.empty() || wants_help(args)) {
    std::cout << kPpScheduleUsage;
    return args.empty() ? 2 : 0;
  }
  const PpScheduleOptions options = parse_pp_schedule(args);
  const PipelineProgram program = program_from(options);
  std::cout << program.name << ": " << program.shape.to_string() << ", " << placement_name(program.placement)
            << " placement; the static check passed\n\n"
            << format_pipeline_order(options.comm ? program.actions : program.compute) << "\n";
  int64_t busy = 0;
  for (const auto& rank : program.timeline.ranks) {
    for (const auto& timed : rank) busy += timed.end - timed.start;
  }
  std::cout << "bubble fraction: " << std::fixed << std::setprecision(4) << program.timeline.bubble_fraction << " ("
            << program.timeline.makespan << " ticks x " << program.shape.ranks << " ranks, " << busy
            << " busy; F = I = W = 1 tick, B = 2)\n";
  if (!options.svg.empty()) {
    std::ofstream out(options.svg);
    out << timeline_svg(program);
    if (!out) throw Error("--svg: cannot write '" + options.svg + "'");
    std::cout << "timeline written to " << options.svg << "\n";
  }
  return 0;
}

}  // namespace titan::cli
