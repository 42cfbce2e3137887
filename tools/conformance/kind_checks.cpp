#include "kind_checks.h"

#include <functional>
#include <vector>

#include "checkpointer_checks.h"
#include "comm_observer_checks.h"
#include "metrics_sink_checks.h"
#include "lr_schedule_checks.h"
#include "model_checks.h"
#include "optimizer_checks.h"
#include "parallelizer_checks.h"
#include "pipeline_schedule_checks.h"
#include "pipeline_split_checks.h"
#include "pipeline_schedule_training.h"
#include "precision_checks.h"
#include "microbatch_runner_checks.h"
#include "titan/config.hpp"
#include "titan/plugin.hpp"

namespace titan::conformance {

namespace {

// A kind whose declaration section is missing fails with the section named.
bool has_section(const KindCheckRequest& request, const std::string& section, const std::string& what,
                 CheckResults& results) {
  if (request.declaration.has(section)) return true;
  results.push_back({section + ".declaration", false, false, 0, 0,
                     request.declaration_path + ": no '" + section + ":' section (" + what + ")"});
  return false;
}

struct KindChecks {
  PluginKind kind;
  const char* section;  // the declaration's section; nullptr: every key is optional
  const char* keys;     // what the section holds, for the missing-section message
  std::function<CheckResults(const KindCheckRequest&)> run;
};

const std::vector<KindChecks>& all_kind_checks() {
  static const std::vector<KindChecks> all = {
      {kind_optimizer, "optimizer", "rule, options, tolerance",
       [](const KindCheckRequest& r) { return check_optimizer(r.plugin, r.declaration.child("optimizer")); }},
      {kind_parallelizer, "parallelizer", "options, shards_over, tolerance",
       [](const KindCheckRequest& r) {
         return check_parallelizer(r.plugin, r.declaration_path, r.declaration, r.ranks, r.scratch);
       }},
      {kind_comm_observer, "comm_observer", "options, max_event_microseconds, max_memory_growth_bytes",
       [](const KindCheckRequest& r) { return check_comm_observer(r.plugin, r.declaration, r.scratch); }},
      {kind_model, "model", "options, vocab_size: the small flavor the checks build",
       [](const KindCheckRequest& r) { return check_model(r.plugin, r.declaration); }},
      {kind_checkpointer, "checkpointer", "options that enable saving, async_options",
       [](const KindCheckRequest& r) { return check_checkpointer(r); }},
      {kind_microbatch_runner, "microbatch_runner", "options, microbatches, tolerance",
       [](const KindCheckRequest& r) { return check_microbatch_runner(r.plugin, r.declaration); }},
      {kind_precision, "precision", "options",
       [](const KindCheckRequest& r) { return check_precision(r.plugin, r.declaration); }},
      {kind_lr_schedule, "lr_schedule", "options, training_steps",
       [](const KindCheckRequest& r) { return check_lr_schedule(r.plugin, r.declaration); }},
      {kind_pipeline_schedule, nullptr, "ranks, microbatches, stages_per_rank, training",
       [](const KindCheckRequest& r) {
         return check_pipeline_schedule(r.plugin, r.declaration_path, r.declaration, r.scratch);
       }},
      {kind_pipeline_splitter, "pipeline_splitter", "options",
       [](const KindCheckRequest& r) { return check_pipeline_splitter(r.plugin, r.declaration, r.ranks); }},
      {kind_metrics_sink, nullptr, "options, max_write_microseconds",
       [](const KindCheckRequest& r) { return check_metrics_sink(r.plugin, r.declaration, r.scratch); }},
  };
  return all;
}

}  // namespace

void register_workers() {
  register_parallelizer_worker();
  register_checkpointer_worker();
  register_pipeline_training_worker();
}

CheckResults run_kind_checks(const KindCheckRequest& request, uint32_t kinds) {
  CheckResults results;
  uint32_t checked = 0;
  for (const KindChecks& kind : all_kind_checks()) {
    if (!(kinds & kind.kind)) continue;
    checked |= kind.kind;
    if (kind.section && !has_section(request, kind.section, kind.keys, results)) continue;
    try {
      CheckResults rows = kind.run(request);
      results.insert(results.end(), rows.begin(), rows.end());
    } catch (const ConfigError&) {
      throw;  // a bad declaration or option: bad input (exit 2)
    } catch (const std::exception& error) {
      // The plugin itself failed (e.g. threw while building): its kind fails, by name.
      std::string message = error.what();
      results.push_back({kinds_to_string(kind.kind) + ".run", false, false, 0, 0,
                         "the checks stopped on an exception: " + message.substr(0, message.find('\n'))});
    }
  }
  uint32_t unchecked = kinds & ~checked;
  for (uint32_t bit = 1; bit != 0 && bit <= unchecked; bit <<= 1) {
    if (unchecked & bit) {
      results.push_back({kinds_to_string(bit), false, true, 0, 0, "no conformance checks for this kind yet"});
    }
  }
  return results;
}

}  // namespace titan::conformance
