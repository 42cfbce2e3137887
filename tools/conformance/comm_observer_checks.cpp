// Synthetic events measure cost and memory (a real job's call pattern:
// enqueue, start, complete, per-group sequence numbers, call sites); real
// Gloo collectives on one rank check that results are untouched.
#include "comm_observer_checks.h"

#include <malloc.h>

#include <ATen/ATen.h>

#include <chrono>

#include "titan/comm.hpp"
#include "titan/comm_observer.hpp"
#include "titan/dist_runtime.hpp"
#include "titan/plugin.hpp"
#include "titan/registry.hpp"
#include "titan/world.hpp"

namespace titan::conformance {

namespace {

struct ObserverDeclaration {
  ConfigNode options;
  double max_event_microseconds = 0;
  double max_memory_growth_bytes = 0;
};

ObserverDeclaration read_declaration(const ConfigNode& declaration) {
  ConfigNode section = declaration.child("comm_observer");
  ObserverDeclaration out;
  out.options = section.child("options");
  out.max_event_microseconds = section.get<double>(
      "max_event_microseconds", 5.0, "most time one collective's enqueue + start + complete may cost the caller");
  out.max_memory_growth_bytes = section.get<double>(
      "max_memory_growth_bytes", 1048576.0, "most heap growth over 40000 further collectives (bounded history)");
  return out;
}

std::unique_ptr<CommObserver> create(const std::string& name, const ObserverDeclaration& declared,
                                     const std::string& scratch) {
  PluginContext context;
  context.options = declared.options;
  context.dump_folder = scratch;
  return PluginRegistry::instance().create_comm_observer(name, context);
}

// Feeds `count` events as the comm layer would: two groups interleaved.
void feed(CommObserver& observer, int64_t first, int64_t count) {
  CollectiveEvent event;
  event.group_ranks = {0, 1, 2, 3};
  event.shapes = {{1024, 256}};
  event.dtype = "float32";
  event.bytes = 1024 * 256 * 4;
  for (int64_t i = first; i < first + count; ++i) {
    event.sequence = static_cast<uint64_t>(i / 2);
    event.group = i % 2 ? "dp_shard" : "tp";
    event.op = i % 2 ? "all_gather" : "reduce_scatter";
    event.call_site = "step " + std::to_string(i / 64) + " / fsdp all_gather layers." + std::to_string(i % 32);
    event.time_s = static_cast<double>(i) * 1e-6;
    observer.on_enqueue(event);
    observer.on_start(event);
    observer.on_complete(event, true);
  }
}

CheckResult event_cost(CommObserver& observer, const ObserverDeclaration& declared) {
  constexpr int64_t kEvents = 20000;
  feed(observer, 0, 2000);  // warm up: first-event set-up (threads, buffers) is not per-event cost
  auto start = std::chrono::steady_clock::now();
  feed(observer, 2000, kEvents);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double microseconds = seconds * 1e6 / kEvents;
  return {"comm_observer.event_cost", microseconds <= declared.max_event_microseconds, false, microseconds,
          declared.max_event_microseconds, "microseconds per collective (enqueue + start + complete), includes "
          "building the synthetic event"};
}

CheckResult bounded_memory(CommObserver& observer, const ObserverDeclaration& declared) {
  feed(observer, 100000, 10000);
  double before = static_cast<double>(mallinfo2().uordblks);
  feed(observer, 110000, 40000);
  double growth = static_cast<double>(mallinfo2().uordblks) - before;
  return {"comm_observer.bounded_memory", growth <= declared.max_memory_growth_bytes, false, growth,
          declared.max_memory_growth_bytes, "heap bytes gained over 40000 more collectives"};
}

// One-rank Gloo group: the observer runs on the comm layer's real path.
CheckResult results_unchanged(CommObserver& observer) {
  World single;
  DistRuntime runtime(single, DistTimeouts{std::chrono::seconds(30), std::chrono::seconds(30)});
  add_comm_observer(&observer);
  double worst = 0;
  try {
    Comm& group = runtime.world_group();
    at::Tensor values = at::arange(1000, at::kFloat).sin();
    at::Tensor reduced = values.clone();
    group.all_reduce(reduced, ReduceOp::sum);
    at::Tensor gathered = group.all_gather(values);
    worst = std::max((reduced - values).abs().max().item<double>(),
                     (gathered.reshape(values.sizes()) - values).abs().max().item<double>());
  } catch (...) {
    clear_comm_observers();
    throw;
  }
  clear_comm_observers();
  return {"comm_observer.results_unchanged", worst == 0, false, worst, 0,
          "all_reduce and all_gather on a 1-rank Gloo group with the observer installed"};
}

}  // namespace

CheckResults check_comm_observer(const std::string& plugin, const ConfigNode& declaration,
                                 const std::string& scratch) {
  const PluginInfo& info = PluginRegistry::instance().load(plugin);
  ObserverDeclaration declared = read_declaration(declaration);
  auto observer = create(info.name, declared, scratch + "/comm_observer");
  CheckResults rows = {event_cost(*observer, declared), bounded_memory(*observer, declared),
                       results_unchanged(*observer)};
  return rows;
}

}  // namespace titan::conformance
