// Save and load run as separate worker groups (a checkpoint must outlive
// the processes that wrote it, and loads happen on other world sizes). The
// harness gives the plugin a dump_folder inside the scratch folder and
// finds the checkpoint there, so the damage checks need no knowledge of
// the plugin's format.
#include "checkpointer_checks.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>

#include "checkpoint_damage.h"
#include "checkpoint_fixture.h"
#include "worker.h"
#include "titan/comm.hpp"
#include "titan/device_mesh.hpp"
#include "titan/dist_runtime.hpp"
#include "titan/plugin.hpp"
#include "titan/registry.hpp"
#include "titan/world.hpp"

namespace titan::conformance {

namespace {

namespace fs = std::filesystem;

// The plugin's options, and those that make it save in the background.
ConfigNode checkpointer_options(const ConfigNode& declaration, bool async) {
  ConfigNode section = declaration.child("checkpointer");
  ConfigNode options = section.child("options");
  if (!section.has("async_options")) {
    if (async) throw ConfigError(section.where() + ": checkpointer.async_options is needed for the async check");
    return options;
  }
  ConfigNode async_options = section.child("async_options");
  if (!async) return options;
  for (const auto& key : async_options.keys()) {
    options.apply_override(key + "=" + async_options.get<std::string>(key, "", "option set for the async save"));
  }
  return options;
}

std::unique_ptr<Checkpointer> create(const std::string& plugin, const ConfigNode& options, int rank, int world_size,
                                     const std::string& dump_folder) {
  const PluginInfo& info = PluginRegistry::instance().load(plugin);
  PluginContext context;
  context.options = options;
  context.rank = rank;
  context.world_size = world_size;
  context.dump_folder = dump_folder;
  context.training_steps = 100;
  return PluginRegistry::instance().create_checkpointer(info.name, context);
}

CheckResult result_row(const std::string& name, bool passed, double measured, const std::string& detail) {
  return {name, passed, false, measured, 0, detail};
}

// One rank: `mode` is save (then wait), load (compare bit for bit) or
// refuse (a damaged checkpoint: throwing or finding none passes, wrong
// values fail). An exception elsewhere fails the run's row with the
// rank's log, and stops the other ranks instead of leaving them waiting.
CheckResults checkpointer_worker(const WorkerArgs& args) {
  const std::string& mode = args.value("mode");
  const std::string& layout = args.value("layout");
  const std::string& row = args.value("row");
  const bool async = args.values.count("async") > 0;
  World world = detect_world();
  validate_checkpoint_layout(layout, world.world_size);
  at::set_num_threads(1);
  std::unique_ptr<DistRuntime> runtime;
  std::unique_ptr<DeviceMesh> mesh;
  std::unique_ptr<Comm> comm;
  if (world.world_size > 1) {
    runtime = std::make_unique<DistRuntime>(world, worker_timeouts());
    mesh = std::make_unique<DeviceMesh>(*runtime, checkpoint_mesh_degrees(layout, world.world_size));
    comm = runtime->new_group("checkpoint", world.all_ranks());
  }
  ConfigNode options = checkpointer_options(ConfigNode::load_file(args.declaration), async);
  auto checkpointer = create(args.plugin, options, world.rank, world.world_size, args.value("dump"));
  checkpointer->attach({world.rank, world.world_size, mesh.get(), comm.get(), "titan-conformance: checkpointer\n"});
  TrainState state = make_checkpoint_state(layout, mesh.get(), world.rank, mode == "save");
  std::string where = mesh ? layout + " on " + mesh->describe() : "one process";

  CheckResults rows;
  if (mode == "save") {
    checkpointer->save(kCheckpointStep, state);
    if (async) scribble_over(state);  // save() has returned: only its own copy may still be written
    checkpointer->wait();
    rows.push_back(result_row(row, true, 0, std::string(async ? "async " : "") + "save of step 7, " + where));
  } else {
    std::map<std::string, at::Tensor> held = state.tensors;
    std::optional<int64_t> step;
    std::string refusal;
    try {
      step = checkpointer->load(state);
    } catch (const std::exception& error) {
      if (mode != "refuse") throw;
      refusal = first_line(error.what());
    }
    bool same_world = std::stoi(args.value("saved_world")) == world.world_size;
    StateComparison loaded = compare_loaded(step, state, held, layout, mesh.get(), world.rank, same_world);
    if (mode == "refuse") {
      bool silent = step && (loaded.wrong_tensors > 0 || !loaded.values_ok || !loaded.rank_local_ok);
      std::string detail = !refusal.empty() ? "refused: " + refusal
                           : !step          ? "load() found no checkpoint"
                           : !silent        ? "loaded, and every value is right"
                                            : "load() returned step " + std::to_string(*step) +
                                                  " with wrong values and no error: " +
                                                  (loaded.wrong_tensors ? loaded.first_wrong
                                                   : !loaded.values_ok  ? loaded.values_detail
                                                                        : loaded.rank_local_detail);
      rows.push_back(result_row(row, !silent, silent ? loaded.wrong_tensors : 0, args.value("damage") + "; " + detail));
    } else {
      bool exact = loaded.wrong_tensors == 0;
      std::string detail = exact ? "every local piece bit-exact, " + where : loaded.first_wrong + " (" + where + ")";
      if (args.values.count("values_row")) {
        rows.push_back(result_row(args.value("values_row"), loaded.values_ok, 0, loaded.values_detail));
        rows.push_back(result_row(args.value("rank_local_row"), loaded.rank_local_ok, 0, loaded.rank_local_detail));
      } else {  // a reshard: one row, whatever is wrong
        if (!loaded.values_ok) exact = false, detail = loaded.values_detail + "; " + detail;
        if (!loaded.rank_local_ok) exact = false, detail = loaded.rank_local_detail + "; " + detail;
      }
      rows.insert(rows.begin(), result_row(row, exact, loaded.wrong_tensors, detail));
    }
  }
  if (comm) comm->barrier();
  return rows;
}

std::string at_world(int world_size) { return "@" + std::to_string(world_size); }

std::string save_layout(int world_size) { return world_size == 1 ? "single" : "fsdp"; }

// Runs one save or load on `ranks` processes; its results and logs go to a
// folder named after its mode and row.
CheckResults run_group(const KindCheckRequest& request, int ranks, const std::string& row,
                       std::map<std::string, std::string> values) {
  std::string folder = values.at("mode") + "-" + row.substr(row.find('.') + 1);
  std::replace(folder.begin(), folder.end(), '>', '_');
  values["row"] = row;
  WorkerRun run;
  run.worker = "checkpointer";
  run.args = {request.plugin, request.declaration_path, request.scratch + "/checkpointer/" + folder, values};
  run.ranks = ranks;
  run.deadline = std::chrono::seconds(120);
  run.row_on_failure = row;
  return run_workers(run);
}

bool all_passed(const CheckResults& rows) {
  return std::all_of(rows.begin(), rows.end(), [](const CheckResult& r) { return r.passed; });
}

// Saves on `world_size` ranks into `dump`; the row fails too when the
// plugin wrote nothing under its dump_folder (a folder option pointing
// elsewhere would hide the checkpoint from the damage checks).
bool save(const KindCheckRequest& request, int world_size, const std::string& row, const std::string& dump,
          bool async, CheckResults& results) {
  std::map<std::string, std::string> values = {{"mode", "save"}, {"layout", save_layout(world_size)}, {"dump", dump}};
  if (async) values["async"] = "1";
  CheckResults rows = run_group(request, world_size, row, values);
  if (all_passed(rows) && files_under(dump).empty()) {
    rows = {result_row(row, false, 0,
                       "save() wrote no files under the dump_folder it was given (" + dump +
                           "); a folder option must be relative to dump_folder")};
  }
  results.insert(results.end(), rows.begin(), rows.end());
  return all_passed(rows);
}

void load(const KindCheckRequest& request, int saved_world, int world_size, const std::string& layout,
          const std::string& row, const std::string& dump, std::map<std::string, std::string> extra,
          bool saved, CheckResults& results) {
  if (!saved) {
    results.push_back(result_row(row, false, 0, "not run: the save it loads failed"));
    return;
  }
  extra.insert({{"mode", "load"}, {"layout", layout}, {"dump", dump}, {"saved_world", std::to_string(saved_world)}});
  CheckResults rows = run_group(request, world_size, row, extra);
  results.insert(results.end(), rows.begin(), rows.end());
}

// Each damage on a fresh copy of the pristine save, in the same place
// (a format may record absolute paths).
void corrupt_checks(const KindCheckRequest& request, int world_size, const std::string& pristine,
                    const std::string& dump, bool saved, CheckResults& results) {
  for (const auto& damage : checkpoint_damages()) {
    std::string row = "checkpointer.corrupt_" + damage.name + at_world(world_size);
    if (!saved) {
      results.push_back(result_row(row, false, 0, "not run: the save it damages failed"));
      continue;
    }
    copy_folder(pristine, dump);
    std::string what = apply_damage(damage.name, dump);
    CheckResults rows = run_group(request, world_size, row,
                                  {{"mode", "refuse"}, {"layout", save_layout(world_size)}, {"dump", dump},
                                   {"saved_world", std::to_string(world_size)}, {"damage", what}});
    results.insert(results.end(), rows.begin(), rows.end());
  }
}

}  // namespace

void register_checkpointer_worker() { register_worker("checkpointer", checkpointer_worker); }

CheckResults check_checkpointer(const KindCheckRequest& request) {
  // Bad options fail here, naming the key, before any rank starts.
  bool has_async = request.declaration.child("checkpointer").has("async_options");
  std::string probe = request.scratch + "/checkpointer/options-probe";
  create(request.plugin, checkpointer_options(request.declaration, false), 0, 1, probe);
  if (has_async) {
    try {
      create(request.plugin, checkpointer_options(request.declaration, true), 0, 1, probe);
    } catch (const std::exception& error) {
      throw ConfigError(request.declaration_path + ": checkpointer.async_options, applied over checkpointer.options: " +
                        error.what());
    }
  }

  std::vector<int> ranks = request.ranks;
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  const int smallest = ranks.front(), largest = ranks.back();
  std::string base = request.scratch + "/checkpointer";
  CheckResults results;
  std::map<int, bool> saved;
  for (int w : ranks) {
    std::string dump = base + "/dump" + at_world(w);
    saved[w] = save(request, w, "checkpointer.save" + at_world(w), dump, false, results);
    if (w == smallest && saved[w]) copy_folder(dump, base + "/pristine");  // before any load touches it
    load(request, w, w, save_layout(w), "checkpointer.round_trip" + at_world(w), dump,
         {{"values_row", "checkpointer.values" + at_world(w)}, {"rank_local_row", "checkpointer.rank_local" + at_world(w)}},
         saved[w], results);
  }

  // Sharded on the largest world, loaded under every other world size
  // (new shard boundaries), whole tensors (DDP) and HSDP.
  std::string from = "checkpointer.reshard" + at_world(largest) + "->";
  std::string largest_dump = base + "/dump" + at_world(largest);
  for (int w : ranks) {
    if (w != largest) load(request, largest, w, save_layout(w), from + std::to_string(w), largest_dump, {}, saved[largest], results);
  }
  auto ddp_world = std::find_if(ranks.begin(), ranks.end(), [](int w) { return w > 1; });
  if (ddp_world != ranks.end()) {
    load(request, largest, *ddp_world, "ddp", "checkpointer.reshard_ddp" + at_world(largest) + "->" + std::to_string(*ddp_world),
         largest_dump, {}, saved[largest], results);
  }
  if (largest >= 4 && largest % 2 == 0) {
    load(request, largest, largest, "hsdp", "checkpointer.reshard_hsdp" + at_world(largest) + "->" + std::to_string(largest),
         largest_dump, {}, saved[largest], results);
  }
  if (ranks.size() == 1 && ddp_world == ranks.end()) {
    results.push_back({"checkpointer.reshard", false, true, 0, 0, "one world size of 1 in --ranks: nothing to reshard onto"});
  }

  if (has_async) {
    std::string dump = base + "/dump_async" + at_world(largest);
    std::string row = "checkpointer.async_save" + at_world(largest);
    bool ok = save(request, largest, row, dump, true, results);
    if (ok) results.pop_back();  // the load's row says whether the saved values were those of save time
    load(request, largest, largest, save_layout(largest), row, dump, {}, ok, results);
  } else {
    results.push_back({"checkpointer.async_save", false, true, 0, 0, "the declaration has no checkpointer.async_options"});
  }

  corrupt_checks(request, smallest, base + "/pristine", base + "/corrupt" + at_world(smallest), saved[smallest], results);
  return results;
}

}  // namespace titan::conformance
