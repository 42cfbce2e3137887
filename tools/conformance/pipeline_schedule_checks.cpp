// Runs every schedule of a pipeline_schedule plugin over a grid of shapes
// through the same calls the trainer makes (validate_pipeline_shape, then
// compute_actions, lower_to_comm, check_pipeline), then trains with each
// schedule whose lists pass.
#include "pipeline_schedule_checks.h"

#include <map>

#include "pipeline_schedule_training.h"
#include "titan/pipeline_program.hpp"
#include "titan/pipeline_schedule.hpp"
#include "titan/plugin.hpp"
#include "titan/registry.hpp"

namespace titan::conformance {

namespace {

std::vector<int64_t> positive_list(const ConfigNode& section, const std::string& key, std::vector<int64_t> fallback,
                                   const std::string& doc) {
  auto values = section.get<std::vector<int64_t>>(key, fallback, doc);
  if (values.empty()) section.fail(key, "expected a non-empty list of integers >= 1");
  for (int64_t value : values) {
    if (value < 1) section.fail(key, "expected integers >= 1, got " + std::to_string(value));
  }
  return values;
}

bool names_a_schedule_key(const std::string& message) {
  for (const char* key : {kPipelineDegreeKey, kLayersPerStageKey, kMicrobatchesKey, kMicrobatchSizeKey}) {
    if (message.find(key) != std::string::npos) return true;
  }
  return false;
}


// A deadlock message lists each blocked rank on its own line; a report row is one line.
std::string one_line(std::string text) {
  for (size_t at = text.find("\n  "); at != std::string::npos; at = text.find("\n  ", at)) text.replace(at, 3, " ");
  return text;
}

}  // namespace

CheckResults check_pipeline_schedule(const std::string& plugin, const std::string& declaration_path,
                                     const ConfigNode& declaration, const std::string& scratch) {
  ConfigNode section = declaration.child("pipeline_schedule");
  const auto ranks = positive_list(section, "ranks", {2, 4}, "pipeline_parallel_degree values to check");
  const auto microbatches = positive_list(section, "microbatches", {1, 2, 4, 8}, "microbatch counts to check");
  const auto per_rank = positive_list(section, "stages_per_rank", {1, 2}, "stages per rank to check");
  auto& registry = PluginRegistry::instance();
  const PluginInfo& info = registry.load(plugin);
  PluginContext context;
  context.options = section.child("options");

  int64_t shapes = 0, accepted = 0, failed = 0, unnamed = 0, unstable = 0, idle = 0;
  std::string failures, unnamed_example, unstable_example, idle_names;
  std::map<std::string, std::string> not_trained;  // the trainer would refuse their lists too
  for (const std::string& name : info.pipeline_schedules) {
    auto schedule = registry.create_pipeline_schedule(name, context);
    auto again = registry.create_pipeline_schedule(name, context);
    int64_t accepted_here = 0;
    std::string first_failure;
    for (int64_t p : ranks) {
      for (int64_t v : per_rank) {
        for (int64_t m : microbatches) {
          const PipelineShape shape{p, p * v, m};
          ++shapes;
          try {
            validate_pipeline_shape(*schedule, shape);
          } catch (const Error& error) {
            if (!names_a_schedule_key(error.what()) && unnamed++ == 0) {
              unnamed_example = name + " (" + shape.to_string() + "): " + first_line(error.what());
            }
            continue;
          }
          ++accepted;
          ++accepted_here;
          try {
            const RankActions compute = schedule->compute_actions(shape);
            if (compute != again->compute_actions(shape) && unstable++ == 0) {
              unstable_example = name + " (" + shape.to_string() + ")";
            }
            check_pipeline(lower_to_comm(compute, schedule->placement(), shape), schedule->placement(), shape,
                           "pipeline schedule " + name);
          } catch (const std::exception& error) {
            ++failed;
            if (first_failure.empty()) first_failure = one_line(error.what());
          }
        }
      }
    }
    if (!first_failure.empty()) {
      failures += (failures.empty() ? "" : "; ") + first_failure;
      not_trained[name] = "its lists fail pipeline_schedule.static_check";
    }
    if (accepted_here == 0) {
      ++idle;
      idle_names += (idle_names.empty() ? "" : ", ") + name;
    }
  }
  const std::string grid = std::to_string(info.pipeline_schedules.size()) + " schedules x " +
                           std::to_string(shapes / std::max<int64_t>(1, static_cast<int64_t>(info.pipeline_schedules.size()))) + " shapes";
  CheckResults rows = {
      {"pipeline_schedule.static_check", failed == 0, false, static_cast<double>(failed), 0,
       failed == 0 ? "all " + std::to_string(accepted) + " accepted shapes of " + grid +
                         " pass the static check (matched sends, no deadlock, every F and B once)"
                   : std::to_string(failed) + " accepted shapes fail the static check: " + failures},
      {"pipeline_schedule.refusals_name_key", unnamed == 0, false, static_cast<double>(unnamed), 0,
       unnamed == 0 ? std::to_string(shapes - accepted) + " refused shapes each name the config key to change"
                    : "a refusal names no config key: " + unnamed_example},
      {"pipeline_schedule.deterministic", unstable == 0, false, static_cast<double>(unstable), 0,
       unstable == 0 ? "two instances give the same lists on every accepted shape (each rank computes its own)"
                     : "two instances give different lists for " + unstable_example},
      {"pipeline_schedule.accepts_some", idle == 0, false, static_cast<double>(idle), 0,
       idle == 0 ? "every schedule accepts at least one shape of the grid"
                 : "schedules refusing every shape of the grid: " + idle_names},
  };
  CheckResults trained =
      check_pipeline_training(plugin, declaration_path, declaration, info.pipeline_schedules, not_trained, scratch);
  rows.insert(rows.end(), trained.begin(), trained.end());
  return rows;
}

}  // namespace titan::conformance
