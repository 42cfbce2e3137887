// Pipeline schedules at PP2 (or TITAN_BENCH_PP_DEGREE) on the same model and batch: each rank's peak
// step memory (what a step allocates above the model at rest: activations,
// gradients, temporaries), the step time, and the bubble measured from the
// executor's Chrome traces beside the theoretical one (F = I = W = 1 tick,
// B = 2) and the same timeline replayed at the measured cost of each stage's
// F, I, W and B with free communication (measured minus replayed: waiting on
// transfers and overheads; replayed minus ticks: unequal costs), with ratios
// to GPipe and 1F1B,
// measured in one run: this binary launches itself under `titan launch` once
// per schedule and runs `titan::train` in each rank. Then GPipe and 1F1B
// again with glibc's default host allocator (training.cpu_allocator
// system) beside the default caching one: minor page faults and step time.
// Usage (from the repository root):
//   titan_bench_pipeline [steps (8)] [microbatches (8)] [repeats (2)] [schedule ...]
#include <sys/resource.h>
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "bench_timing.hpp"
#include "titan/config.hpp"
#include "titan/logging.hpp"
#include "titan/metrics_sink.hpp"
#include "titan/peak_memory.hpp"
#include "titan/pipeline_program.hpp"
#include "titan/registry.hpp"
#include "titan/run_spec.hpp"
#include "titan/trainer.hpp"
#include "titan/world.hpp"

// The program's body: its main() is generated (CMakeLists.txt).
namespace titan_bench_pipeline {

namespace fs = std::filesystem;

// The pp degree: 2, or TITAN_BENCH_PP_DEGREE (the workers inherit it). 4
// ranks of 1 thread on a 2-core machine take turns on the cores: their
// figures there are indicative only.
int degree() {
  static const int value = [] {
    const char* text = std::getenv("TITAN_BENCH_PP_DEGREE");
    return text ? std::atoi(text) : 2;
  }();
  return value;
}
constexpr int kWarmupSteps = 2;  // left out of every figure: the first step also sends shape headers
constexpr int kFirstPort = 29741;
const std::vector<std::string> kSchedules = {
    "GPipe", "1F1B", "Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV"};
// The debug model (dim 256, 16 heads, FFN 768) with 8 blocks, so that a
// rank's activations outweigh its parameters and optimizer state. Every stage
// gets the same number of blocks (first/last_stage_less_layers 0): with this
// vocabulary the embedding and the head cost far less than a block, and
// TorchTitan's default (each counts as one) would leave the V placement's
// rank 1 with 5 of the 8 blocks, a bubble of the split, not of the schedule.
constexpr int kBlocks = 8;
constexpr int kSeq = 256;

std::string run_yaml(const std::string& schedule, int steps, int microbatches, const fs::path& folder,
                     const std::string& allocator) {
  const std::string blocks = std::to_string(kBlocks), batch = std::to_string(microbatches);
  return "job: {dump_folder: '" + folder.string() + "'}\n" +
         "model: {name: llama3, flavor: debugmodel, n_layers: " + blocks +
         ", tokenizer_path: assets/tokenizer/stories_bpe.json}\n" +
         "optimizer: {name: AdamW, lr: 8.0e-4}\n" +
         "lr_scheduler: {warmup_steps: 2}\n" +
         "training: {local_batch_size: " + batch + ", seq_len: " + std::to_string(kSeq) +
         ", steps: " + std::to_string(steps) + ", threads: 1, cpu_allocator: " + allocator + "}\n" +
         "metrics: {log_freq: 1}\n" +
         "plugins:\n" +
         "  - {name: pipeline, pipeline_parallel_degree: " + std::to_string(degree()) +
         ", pipeline_parallel_schedule: " + schedule + ", num_pp_microbatches: " + batch +
         ", pipeline_parallel_first_stage_less_layers: 0, pipeline_parallel_last_stage_less_layers: 0" +
         ", pipeline_parallel_trace: '" + (folder / "trace").string() + "'}\n";
}

// Called after every step (log_freq 1), once the gradients are freed: the
// window since the last call is one step, and what is live now is the model
// at rest (parameters, AdamW moments, rotary tables), where the next window
// starts.
class StepMemorySink : public titan::MetricsSink {
 public:
  StepMemorySink(titan::CpuMemoryTracker& tracker, int rank) : tracker_(tracker), rank_(rank) {}
  void write(int64_t step, const std::map<std::string, double>& metrics) override {
    const int64_t peak = tracker_.take_peak();
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    std::printf("RESULT %d %ld %ld %ld %.0f %.6f %.17g %ld\n", rank_, static_cast<long>(step),
                static_cast<long>(peak - rest_), static_cast<long>(rest_), metrics.at("memory/state(GiB)") * double(1ull << 30),
                metrics.at("time_metrics/elapsed(s)"), metrics.at("loss_metrics/global_avg_loss"),
                static_cast<long>(usage.ru_minflt));
    std::fflush(stdout);
    rest_ = tracker_.live();
  }

 private:
  titan::CpuMemoryTracker& tracker_;
  int rank_;
  int64_t rest_ = 0;  // the first window also holds the model's construction
};

int worker(const std::string& schedule, int steps, int microbatches, const fs::path& folder,
           const std::string& allocator) {
  titan::World world = titan::detect_world();
  titan::init_logging(world.rank, "warn");
  auto config =
      titan::ConfigNode::parse(run_yaml(schedule, steps, microbatches, folder, allocator), "bench_pipeline.yaml");
  titan::RunSpec spec = titan::resolve_run(config, world.rank, world.world_size);
  titan::CpuMemoryTracker tracker;
  spec.metrics_sinks.push_back(std::make_unique<StepMemorySink>(tracker, world.rank));
  try {
    titan::train(spec, world);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "rank %d, %s: %s\n", world.rank, schedule.c_str(), error.what());
    return 1;
  }
  return 0;
}

struct StepResult {
  double above_rest = 0, rest = 0, state = 0, elapsed = 0, loss = 0;
  long minor_faults = 0;  // the process's, since it started
};

struct TraceEvent {
  titan::Action action;
  double start = 0, end = 0;  // microseconds
};

struct Measured {
  bool ok = false;
  std::string output;                                  // the launch's, for a failed run
  std::map<int, std::map<int64_t, StepResult>> steps;  // [rank][step]
  std::vector<std::vector<TraceEvent>> traces;         // per rank, every step's actions in order
};

std::string run(const std::string& command, int* status) {
  std::string output;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return output;
  char buffer[4096];
  while (fgets(buffer, sizeof(buffer), pipe)) output += buffer;
  *status = pclose(pipe);
  return output;
}

Measured measure(const fs::path& self, const fs::path& titan, const std::string& schedule, int port, int steps,
                 int microbatches, const fs::path& folder, const std::string& allocator = "caching") {
  Measured out;
  fs::remove_all(folder);
  fs::create_directories(folder);
  const std::string command = "TITAN_BENCH_PP_WORKER=" + schedule + " TITAN_BENCH_PP_FOLDER='" + folder.string() +
                              "' TITAN_BENCH_PP_ALLOCATOR=" + allocator + " " + titan.string() + " launch --nproc-per-node " + std::to_string(degree()) +
                              " --master-port " + std::to_string(port) + " --grace-period-s 5 -- " + self.string() +
                              " " + std::to_string(steps) + " " + std::to_string(microbatches) + " 2>&1";
  int status = 0;
  out.output = run(command, &status);
  std::istringstream lines(out.output);
  for (std::string line; std::getline(lines, line);) {
    auto at = line.find("RESULT ");
    if (at == std::string::npos) continue;
    std::istringstream fields(line.substr(at + 7));
    int rank;
    long step;
    StepResult result;
    fields >> rank >> step >> result.above_rest >> result.rest >> result.state >> result.elapsed >> result.loss >>
        result.minor_faults;
    out.steps[rank][step] = result;
  }
  for (int rank = 0; rank < degree(); ++rank) {
    std::ifstream file(folder / ("trace_rank" + std::to_string(rank) + ".json"));
    if (!file) return out;
    auto json = nlohmann::json::parse(file);
    std::vector<TraceEvent> events;
    for (const auto& event : json["traceEvents"]) {
      const double start = event["ts"].get<double>();
      events.push_back(
          {titan::Action::parse(event["name"].get<std::string>()), start, start + event["dur"].get<double>()});
    }
    out.traces.push_back(std::move(events));
  }
  out.ok = status == 0 && out.steps.size() == static_cast<size_t>(degree()) && out.steps.at(0).size() == static_cast<size_t>(steps);
  return out;
}

// From the traces, over the steady steps: the bubble = 1 - (compute time of
// all ranks) / (ranks x the step's span), the span being the longest rank's
// first-action-start to last-action-end (ranks enter a step together: the
// step before ends in collectives over pp); and each compute type's mean
// duration, in microseconds. add() takes one run; repeats pool.
class TraceSummary {
 public:
  void add(const std::vector<std::vector<TraceEvent>>& traces, int steps) {
    busy_us_.resize(traces.size());
    for (int step = kWarmupSteps; step < steps; ++step) {
      double span = 0, busy = 0;
      for (size_t rank = 0; rank < traces.size(); ++rank) {
        const auto& events = traces[rank];
        const size_t per_step = events.size() / static_cast<size_t>(steps);
        const auto first = events.begin() + static_cast<std::ptrdiff_t>(step * per_step);
        const auto last = first + static_cast<std::ptrdiff_t>(per_step);
        double begin = first->start, end = first->end;
        for (auto event = first; event != last; ++event) {
          begin = std::min(begin, event->start);
          end = std::max(end, event->end);
          stages_ = std::max(stages_, event->action.stage + 1);
          if (!titan::is_compute(event->action.type)) continue;
          busy += event->end - event->start;
          busy_us_[rank] += event->end - event->start;
          auto& [sum, count] = durations_[event->action.type];
          sum += event->end - event->start;
          ++count;
          auto& [stage_sum, stage_count] = stage_durations_[{event->action.stage, event->action.type}];
          stage_sum += event->end - event->start;
          ++stage_count;
        }
        span = std::max(span, end - begin);
      }
      bubbles_.push_back(1.0 - busy / (static_cast<double>(traces.size()) * span));
    }
  }
  double bubble() const {
    double total = 0;
    for (double bubble : bubbles_) total += bubble;
    return total / static_cast<double>(bubbles_.size());
  }
  int64_t stages() const { return stages_; }
  // A rank's compute (F, B, I, W) per step, in seconds.
  double compute_seconds(int rank) const {
    return busy_us_.at(static_cast<size_t>(rank)) * 1e-6 / static_cast<double>(bubbles_.size());
  }
  double mean_us(titan::ActionType type) const {
    auto found = durations_.find(type);
    return found == durations_.end() ? 0.0 : found->second.first / static_cast<double>(found->second.second);
  }
  // Each stage's mean F, I, W and B in whole microseconds (what this run's
  // trace measured), for replaying the schedule at them.
  titan::ActionCosts stage_costs_us() const {
    titan::ActionCosts costs;
    costs.stages.resize(static_cast<size_t>(stages_));
    for (int64_t stage = 0; stage < stages_; ++stage) {
      auto mean = [&](titan::ActionType type) {
        auto found = stage_durations_.find({stage, type});
        return found == stage_durations_.end()
                   ? int64_t{0}
                   : std::llround(found->second.first / static_cast<double>(found->second.second));
      };
      titan::ActionCosts& own = costs.stages[static_cast<size_t>(stage)];
      own.forward = mean(titan::ActionType::forward);
      own.backward_input = mean(titan::ActionType::backward_input);
      own.backward_weight = mean(titan::ActionType::backward_weight);
      own.full_backward = mean(titan::ActionType::full_backward);
      // DualPipeV runs most backwards whole and a few split: a kind the
      // trace never saw costs what the others imply.
      if (own.full_backward == 0) own.full_backward = own.backward_input + own.backward_weight;
      if (own.backward_input == 0 && own.backward_weight == 0) {
        own.backward_input = own.full_backward * 2 / 3;
        own.backward_weight = own.full_backward - own.backward_input;
      }
    }
    return costs;
  }
  // A line of each stage's mean F, I, W, B in ms (the kinds it ran).
  std::string stage_costs_text() const {
    std::string text;
    char buffer[64];
    for (int64_t stage = 0; stage < stages_; ++stage) {
      text += (stage ? "; stage " : "stage ") + std::to_string(stage) + ":";
      for (auto type : {titan::ActionType::forward, titan::ActionType::backward_input,
                        titan::ActionType::backward_weight, titan::ActionType::full_backward}) {
        auto found = stage_durations_.find({stage, type});
        if (found == stage_durations_.end()) continue;
        std::snprintf(buffer, sizeof(buffer), " %s %.1f", titan::Action{type, 0, 0}.to_string().substr(1, 1).c_str(),
                      found->second.first / static_cast<double>(found->second.second) * 1e-3);
        text += buffer;
      }
    }
    return text;
  }
  // B, or I + W where the schedule splits the backward.
  double backward_us() const {
    const double full = mean_us(titan::ActionType::full_backward);
    return full > 0 ? full : mean_us(titan::ActionType::backward_input) + mean_us(titan::ActionType::backward_weight);
  }

 private:
  std::vector<double> bubbles_;  // one per steady step
  std::vector<double> busy_us_;  // per rank, summed over the steady steps
  int64_t stages_ = 0;
  std::map<titan::ActionType, std::pair<double, int64_t>> durations_;
  std::map<std::pair<int64_t, titan::ActionType>, std::pair<double, int64_t>> stage_durations_;
};

// The schedule's theoretical bubble: F = I = W = 1 tick, B = 2, as `titan
// pp-schedule` prints and the trainer logs; with `costs`, its timeline
// replayed at those (the measured microseconds of each stage's F, I, W, B)
// and communication free: what the schedule leaves idle when the actions
// cost what they cost here, but nothing waits on a transfer or an overhead.
double theoretical_bubble(const std::string& name, int64_t stages, int microbatches,
                          const titan::ActionCosts* costs = nullptr) {
  titan::PluginContext context;
  context.options = titan::ConfigNode::parse("{}", "bench");
  auto schedule = titan::PluginRegistry::instance().create_pipeline_schedule(name, context);
  titan::PipelineShape shape;
  shape.ranks = degree();
  shape.stages = stages;
  shape.microbatches = microbatches;
  titan::PipelineProgram program = titan::compile_pipeline(*schedule, shape);
  if (!costs) return program.timeline.bubble_fraction;
  return titan::check_pipeline(program.actions, program.placement, shape, program.name, *costs).bubble_fraction;
}

// One schedule's runs (repeats), pooled over their steady steps.
struct Row {
  std::string schedule;
  std::vector<Measured> runs;
  TraceSummary trace;
  double theory = 0;
  double replayed = 0;  // the theory at the measured costs

  // The largest step peak of a rank (the same in every run: the allocator
  // counts requests).
  double peak_mib(int rank) const {
    double most = 0;
    for (const Measured& run : runs) {
      for (const auto& [step, result] : run.steps.at(rank)) {
        if (step > kWarmupSteps) most = std::max(most, result.above_rest);
      }
    }
    return most / 1048576.0;
  }
  // The median step of rank 0, from the trainer's elapsed time at each step.
  double step_seconds() const {
    std::vector<double> times;
    for (const Measured& run : runs) {
      const auto& steps = run.steps.at(0);
      for (const auto& [step, result] : steps) {
        auto before = steps.find(step - 1);
        if (step > kWarmupSteps && before != steps.end()) times.push_back(result.elapsed - before->second.elapsed);
      }
    }
    return titan::bench::median(times);
  }
  const StepResult& last_step(int rank) const { return runs.front().steps.at(rank).rbegin()->second; }
  // Minor page faults of rank `rank`'s process per steady step (median).
  double faults_per_step(int rank) const {
    std::vector<double> counts;
    for (const Measured& run : runs) {
      const auto& steps = run.steps.at(rank);
      for (const auto& [step, result] : steps) {
        auto before = steps.find(step - 1);
        if (step > kWarmupSteps && before != steps.end()) {
          counts.push_back(static_cast<double>(result.minor_faults - before->second.minor_faults));
        }
      }
    }
    return titan::bench::median(counts);
  }
};

std::string tail(const std::string& text, size_t characters) {
  return text.size() <= characters ? text : "..." + text.substr(text.size() - characters);
}

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 8;
  const int microbatches = argc > 2 ? std::atoi(argv[2]) : 8;
  const char* worker_schedule = std::getenv("TITAN_BENCH_PP_WORKER");
  const char* worker_folder = std::getenv("TITAN_BENCH_PP_FOLDER");
  const char* worker_allocator = std::getenv("TITAN_BENCH_PP_ALLOCATOR");
  if (worker_schedule && worker_folder) {
    return worker(worker_schedule, steps, microbatches, worker_folder, worker_allocator ? worker_allocator : "caching");
  }
  const int repeats = argc > 3 ? std::atoi(argv[3]) : 2;
  if (steps <= kWarmupSteps + 1 || microbatches < 4 || microbatches % degree() != 0 || repeats < 1) {
    std::fprintf(stderr,
                 "usage: titan_bench_pipeline [steps > %d (8)] [microbatches: even, >= 4 (8)] [repeats (2)] "
                 "[schedule ...]\n",
                 kWarmupSteps + 1);
    return 2;
  }
  if (!fs::exists("assets/tokenizer/stories_bpe.json")) {
    std::fprintf(stderr, "titan_bench_pipeline: run it from the repository root (it reads assets/tokenizer)\n");
    return 2;
  }
  std::vector<std::string> schedules(argv + std::min(argc, 4), argv + argc);
  if (schedules.empty()) schedules = kSchedules;
  if (schedules.front() != "GPipe") schedules.insert(schedules.begin(), "GPipe");  // the reference
  titan::init_logging(0, "warn");
  const fs::path self = fs::canonical("/proc/self/exe");
  const fs::path titan = self.parent_path() / "titan";
  const fs::path root = fs::temp_directory_path() / "titan_bench_pipeline";

  // Each schedule `repeats` times under `allocator`; the schedules
  // alternate, so that load from elsewhere falls on all of them. Empty when
  // a run failed (its output printed).
  auto run_rows = [&](const std::vector<std::string>& names, const std::string& allocator, int first_port) {
    std::vector<Row> out(names.size());
    for (int repeat = 0; repeat < repeats; ++repeat) {
      for (size_t i = 0; i < names.size(); ++i) {
        Row& row = out[i];
        row.schedule = names[i];
        const std::string folder = (allocator == "caching" ? "" : allocator + "_") + row.schedule;
        Measured run = measure(self, titan, row.schedule, first_port + static_cast<int>(i % 8), steps, microbatches,
                               root / folder, allocator);
        if (!run.ok) {
          std::fprintf(stderr, "%s (%s allocator) failed; the launch's output ends:\n%s\n", row.schedule.c_str(),
                       allocator.c_str(), tail(run.output, 4000).c_str());
          return std::vector<Row>{};
        }
        row.trace.add(run.traces, steps);
        row.runs.push_back(std::move(run));
        std::fprintf(stderr, "%s (%s): run %d of %d done\n", row.schedule.c_str(), allocator.c_str(), repeat + 1,
                     repeats);
      }
    }
    return out;
  };
  std::vector<Row> rows = run_rows(schedules, "caching", kFirstPort);
  if (rows.empty()) return 1;
  for (Row& row : rows) {
    row.theory = theoretical_bubble(row.schedule, row.trace.stages(), microbatches);
    const titan::ActionCosts measured = row.trace.stage_costs_us();
    row.replayed = theoretical_bubble(row.schedule, row.trace.stages(), microbatches, &measured);
  }

  const Row& gpipe = rows.front();
  std::printf("\npipeline schedules at pp %d: llama3 debugmodel with %d blocks (dim 256), the same count per stage, "
              "vocab 1444, batch %d x seq %d in %d microbatches of 1, fp32, 1 thread per rank; %d runs of %d steps, "
              "the first %d of each left out\n",
              degree(), kBlocks, microbatches, kSeq, microbatches, repeats, steps, kWarmupSteps);
  std::printf("step peak: the most a step allocates above what stays live between steps, per rank (LibTorch CPU\n"
              "allocator): activations, this rank's gradients and temporaries. s/step: median. bubble: idle share\n"
              "of the ranks' compute time over the step's span, from the Chrome traces; theory: F = I = W = 1 tick,\n"
              "B = 2. compute: a rank's F, B, I and W time per step. bwd / F: the mean time of a backward (B, or\n"
              "I + W) over a forward's\n");
  const Row* one_f_one_b = nullptr;
  for (const Row& row : rows) {
    if (row.schedule == "1F1B") one_f_one_b = &row;
  }
  const double one_f_one_b_step = one_f_one_b ? one_f_one_b->step_seconds() : std::nan("");
  std::printf("| schedule | stages | step peak MiB r0 | r1 | / GPipe r0, r1 | s/step | / GPipe | / 1F1B | bubble measured | "
              "replayed at measured costs | theory | compute s r0, r1 | bwd / F | faults/step r0 |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& row : rows) {
    std::printf("| %s | %ld | %.1f | %.1f | %.3f, %.3f | %.3f | %.2f | %.3f | %.3f | %.3f | %.3f | %.2f, %.2f | %.2f | %.0f |\n",
                row.schedule.c_str(), static_cast<long>(row.trace.stages()), row.peak_mib(0), row.peak_mib(1),
                row.peak_mib(0) / gpipe.peak_mib(0), row.peak_mib(1) / gpipe.peak_mib(1), row.step_seconds(),
                row.step_seconds() / gpipe.step_seconds(), row.step_seconds() / one_f_one_b_step, row.trace.bubble(),
                row.replayed, row.theory,
                row.trace.compute_seconds(0), row.trace.compute_seconds(1),
                row.trace.backward_us() / row.trace.mean_us(titan::ActionType::forward), row.faults_per_step(0));
  }
  std::printf("\nmeasured mean ms per action, by stage (what the replay uses)\n");
  for (const Row& row : rows) std::printf("- %s: %s\n", row.schedule.c_str(), row.trace.stage_costs_text().c_str());
  // Parameters, gradients and AdamW's two moments are all fp32 and the same
  // size: the gradients are a quarter of the trainer's state bytes.
  std::printf("\nlive between steps (parameters, AdamW moments, rotary tables) MiB: r0 %.1f, r1 %.1f (GPipe); "
              "gradients, part of every step peak once the first backward ran: r0 %.1f, r1 %.1f\n",
              gpipe.last_step(0).rest / 1048576.0, gpipe.last_step(1).rest / 1048576.0,
              gpipe.last_step(0).state / 4 / 1048576.0, gpipe.last_step(1).state / 4 / 1048576.0);
  double worst = 0;
  for (const Row& row : rows) {
    for (const Measured& run : row.runs) {
      const double loss = run.steps.at(0).rbegin()->second.loss;
      worst = std::max(worst, std::abs(loss - gpipe.last_step(0).loss) / std::abs(gpipe.last_step(0).loss));
    }
  }
  std::printf("same computation: every run's last loss is within %.1e (relative) of GPipe's\n", worst);

  // The host allocator: GPipe and 1F1B again with glibc's defaults, beside
  // the caching rows above (same repeats, alternating).
  const std::vector<Row> system_rows = run_rows({"GPipe", "1F1B"}, "system", kFirstPort + 8);
  if (system_rows.empty()) return 1;
  std::printf("\nhost allocator (training.cpu_allocator): minor page faults per steady step of rank 0's process, "
              "s/step median, and 1F1B / GPipe\n");
  std::printf("| allocator | GPipe faults/step | 1F1B faults/step | GPipe s/step | 1F1B s/step | 1F1B / GPipe |\n"
              "|---|---|---|---|---|---|\n");
  std::printf("| system (glibc defaults) | %.0f | %.0f | %.3f | %.3f | %.2f |\n", system_rows[0].faults_per_step(0),
              system_rows[1].faults_per_step(0), system_rows[0].step_seconds(), system_rows[1].step_seconds(),
              system_rows[1].step_seconds() / system_rows[0].step_seconds());
  if (one_f_one_b) {
    std::printf("| caching (default) | %.0f | %.0f | %.3f | %.3f | %.2f |\n", gpipe.faults_per_step(0),
                one_f_one_b->faults_per_step(0), gpipe.step_seconds(), one_f_one_b->step_seconds(),
                one_f_one_b->step_seconds() / gpipe.step_seconds());
  }
  return 0;
}

}  // namespace titan_bench_pipeline
