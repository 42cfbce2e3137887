// The layout search: every mesh of N devices the model can take, each with
// every schedule, microbatch split, AC mode and float8 setting; the ones
// that fit, best first; each top one written as a config and checked as
// `titan config check --world-size N` checks it.
#include "titan/layout_search.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include <c10/util/StringUtil.h>

#include "layout_cost.hpp"
#include "titan/error.hpp"

namespace titan {

namespace {

// Bounds that keep the search to seconds; beyond them no recipe goes.
constexpr int64_t kMaxPipeline = 32, kMaxContext = 32, kMaxExperts = 64, kMaxMicrobatches = 256;
constexpr int kMaxScaleUp = 64;  // "fewest devices" tries N x 2, x 4, ... up to this

const std::vector<std::string>& schedules() {
  static const std::vector<std::string> names{"1F1B", "Interleaved1F1B", "GPipe", "InterleavedZeroBubble",
                                              "ZBVZeroBubble"};
  return names;
}

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> found;
  for (int64_t d = 1; d <= n; ++d) {
    if (n % d == 0) found.push_back(d);
  }
  return found;
}

// Compiling a schedule for a shape is the slow part; shapes repeat.
class PipelineCache {
 public:
  explicit PipelineCache(int64_t layers) : layers_(layers) {}
  const std::optional<PipelineFacts>& get(const std::string& schedule, int64_t pp, int64_t microbatches,
                                          int64_t backward) {
    auto key = std::make_tuple(schedule, pp, microbatches, backward);
    auto found = facts_.find(key);
    if (found != facts_.end()) return found->second;
    std::string why;
    return facts_[key] = pipeline_facts(schedule, pp, microbatches, backward, layers_, why);
  }

 private:
  int64_t layers_;
  std::map<std::tuple<std::string, int64_t, int64_t, int64_t>, std::optional<PipelineFacts>> facts_;
};

const std::vector<std::string>& fixable_dims() {
  static const std::vector<std::string> dims{"pp", "dp_replicate", "dp_shard", "cp", "tp", "ep"};
  return dims;
}

bool matches_fixed(const MeshShape& mesh, const std::map<std::string, int64_t>& fixed) {
  const std::map<std::string, int64_t> degrees = {{"pp", mesh.pp}, {"dp_replicate", mesh.dp_replicate},
                                                  {"dp_shard", mesh.dp_shard}, {"cp", mesh.cp},
                                                  {"tp", mesh.tp}, {"ep", mesh.ep}};
  for (const auto& [dim, degree] : fixed) {
    if (degrees.at(dim) != degree) return false;
  }
  return true;
}

bool tp_fits(const ModelShape& model, int64_t tp) {
  for (const auto& [key, value] : model.tp_sizes) {
    if (value % tp != 0) return false;
  }
  return true;
}

std::vector<int64_t> expert_degrees(const ModelShape& model, int64_t span) {
  std::vector<int64_t> degrees{1};
  if (!model.moe()) return degrees;
  for (int64_t ep : divisors(model.experts)) {
    if (ep > 1 && ep <= kMaxExperts && span % ep == 0) degrees.push_back(ep);
  }
  return degrees;
}

// Calls visit(layout, pipeline facts) for every layout of `devices` devices.
template <class Visit>
void for_each_layout(const ModelShape& model, const SearchRequest& request, const DeviceSpec& device, int64_t devices,
                     PipelineCache& cache, const Visit& visit) {
  const int64_t sequences = request.global_batch_tokens / request.seq_len;
  const int64_t seq = request.seq_len;
  std::vector<bool> float8{false};
  if (device.has_float8()) float8.push_back(true);
  const AcMode modes[] = {AcMode::none, AcMode::every_2nd, AcMode::op, AcMode::full};
  const PipelineFacts flat = no_pipeline(model.layers);
  for (int64_t tp : divisors(devices)) {
    if (tp > device.devices_per_node || !tp_fits(model, tp)) continue;
    for (int64_t cp : divisors(devices / tp)) {
      if (cp > kMaxContext || (cp > 1 && seq % (2 * cp) != 0)) continue;
      for (int64_t pp : divisors(devices / tp / cp)) {
        if (pp > kMaxPipeline || (pp > 1 && model.layers + 2 < 2 * pp)) continue;
        if (pp > 1 && cp > 1) continue;  // context_parallel refuses a pipeline (stages would pass sequence shards)
        if (tp > 1 && pp == 1 && seq % tp != 0) continue;  // sequence parallelism splits the sequence
        const int64_t dp = devices / tp / cp / pp;
        if (sequences % dp != 0) continue;
        const int64_t per_rank = sequences / dp;
        for (int64_t replicate : divisors(dp)) {
          const int64_t shard = dp / replicate;
          for (int64_t ep : expert_degrees(model, shard * cp * tp)) {
            MeshShape mesh{pp, replicate, shard, cp, tp, ep};
            if (!matches_fixed(mesh, request.fixed)) continue;
            for (AcMode ac : modes) {
              for (bool f8 : float8) {
                Layout layout;
                layout.mesh = mesh;
                layout.ac = ac;
                layout.float8 = f8;
                if (pp == 1) {
                  for (int64_t local : divisors(per_rank)) {
                    layout.local_batch_size = local;
                    layout.accumulation = per_rank / local;
                    visit(layout, flat);
                  }
                  continue;
                }
                layout.local_batch_size = per_rank;
                for (const auto& schedule : schedules()) {
                  for (int64_t size : divisors(per_rank)) {
                    if (per_rank / size > kMaxMicrobatches) continue;
                    const auto& facts = cache.get(schedule, pp, per_rank / size, backward_ticks(ac));
                    if (!facts) continue;
                    layout.schedule = schedule;
                    layout.microbatch_size = size;
                    layout.microbatches = per_rank / size;
                    visit(layout, *facts);
                  }
                }
              }
            }
          }
        }
      }
    }
  }
}

int parallel_dims(const MeshShape& mesh) {
  int count = 0;
  for (int64_t degree : {mesh.pp, mesh.dp_replicate, mesh.dp_shard, mesh.cp, mesh.tp, mesh.ep}) count += degree > 1;
  return count;
}

// Faster first; within 0.5% the simpler mesh, then the smaller peak.
bool better(const LayoutPlan& a, const LayoutPlan& b) {
  const double ta = a.estimate.tokens_per_s, tb = b.estimate.tokens_per_s;
  if (std::abs(ta - tb) > 0.005 * std::max(ta, tb)) return ta > tb;
  const int da = parallel_dims(a.layout.mesh), db = parallel_dims(b.layout.mesh);
  if (da != db) return da < db;
  return a.memory.total() < b.memory.total();
}

void check_request(const SearchRequest& request) {
  auto positive = [](const char* flag, int64_t value) {
    if (value < 1) throw Error(std::string(flag) + ": expected a positive integer, got " + std::to_string(value));
  };
  positive("--gpus", request.devices);
  positive("--seq-len", request.seq_len);
  positive("--global-batch-tokens", request.global_batch_tokens);
  positive("--top", request.top);
  if (request.global_batch_tokens % request.seq_len != 0) {
    throw Error("--global-batch-tokens " + std::to_string(request.global_batch_tokens) +
                " is not a whole number of sequences of --seq-len " + std::to_string(request.seq_len) + "; use " +
                std::to_string(std::max<int64_t>(1, request.global_batch_tokens / request.seq_len) * request.seq_len));
  }
  if (!(request.margin > 0 && request.margin <= 1)) {
    throw Error("--margin: expected a share of the device's memory in (0, 1], got " + std::to_string(request.margin));
  }
  const auto& dims = fixable_dims();
  for (const auto& [dim, degree] : request.fixed) {
    if (std::find(dims.begin(), dims.end(), dim) == dims.end()) {
      throw Error("--layout: unknown mesh dim '" + dim + "' (known: " + c10::Join(", ", dims) + ")");
    }
    positive(("--layout " + dim).c_str(), degree);
  }
}

// The fewest devices of this kind (N x 2, x 4, ...) on which some layout fits.
int64_t fewest_devices(const ModelShape& model, const SearchRequest& request, const DeviceSpec& device,
                       PipelineCache& cache) {
  const double budget = request.margin * static_cast<double>(device.memory_bytes);
  for (int64_t devices = request.devices * 2; devices <= request.devices * kMaxScaleUp; devices *= 2) {
    bool fits = false;
    for_each_layout(model, request, device, devices, cache, [&](const Layout& layout, const PipelineFacts& facts) {
      if (!fits) fits = layout_memory(model, layout, request.seq_len, facts, device).total() <= budget;
    });
    if (fits) return devices;
  }
  return 0;
}

std::string nothing_fits_message(const SearchResult& result) {
  const SearchRequest& request = result.request;
  std::string message = "no layout of " + result.model.name + " " + result.model.flavor + " fits " +
                        std::to_string(request.devices) + " x " + result.device.name + " (" +
                        gib(static_cast<double>(result.device.memory_bytes)) + " each, " +
                        std::to_string(static_cast<int>(std::lround(request.margin * 100))) +
                        "% usable) at seq_len " + std::to_string(request.seq_len) + " and " +
                        std::to_string(request.global_batch_tokens) + " tokens a step";
  if (result.candidates == 0) {
    return message + ": no mesh of these degrees divides the batch (" +
           std::to_string(request.global_batch_tokens / request.seq_len) +
           " sequences) and the model; change --gpus, --global-batch-tokens or --layout";
  }
  message += ". The smallest layout (" + result.smallest.layout.mesh.to_string() + ", AC " +
             ac_mode_name(result.smallest.layout.ac) + ") needs " + gib(result.smallest.memory.total()) +
             " a device: a device of at least " + gib(result.memory_needed_bytes) + " would fit it";
  if (result.fewest_devices > 0) {
    message += "; or " + std::to_string(result.fewest_devices) + " x " + result.device.name +
               " (doubling from " + std::to_string(request.devices) + ", the first count on which a layout fits)";
  } else {
    message += "; no layout fits even " + std::to_string(request.devices * kMaxScaleUp) + " x " + result.device.name;
  }
  return message;
}

}  // namespace

const char* ac_mode_name(AcMode mode) {
  switch (mode) {
    case AcMode::none: return "none";
    case AcMode::every_2nd: return "selective 2";
    case AcMode::op: return "selective op";
    case AcMode::full: return "full";
  }
  return "none";
}

SearchResult search_layouts(const SearchRequest& request) {
  check_request(request);
  SearchResult result;
  result.request = request;
  result.device = find_device(request.device);
  result.model = read_model_shape(request.model, request.flavor, request.seq_len);
  result.assumptions = cost_model_assumptions();
  for (const auto& line : estimate_step(StepWork{}, MeshShape{}, result.device).assumptions) {
    result.assumptions.push_back(line);
  }
  const DeviceSpec& device = result.device;
  const ModelShape& model = result.model;
  const int64_t sequences = request.global_batch_tokens / request.seq_len;
  const double budget = request.margin * static_cast<double>(device.memory_bytes);

  PipelineCache cache(model.layers);
  // The best plan of each mesh and schedule: the table shows layouts, not
  // the same layout with another batch split.
  std::map<std::pair<std::string, std::string>, LayoutPlan> best;
  double smallest = std::numeric_limits<double>::infinity();
  for_each_layout(
      model, request, device, request.devices, cache, [&](const Layout& layout, const PipelineFacts& facts) {
        ++result.candidates;
        LayoutPlan plan;
        plan.layout = layout;
        plan.memory = layout_memory(model, layout, request.seq_len, facts, device);
        if (plan.memory.total() < smallest) {
          smallest = plan.memory.total();
          result.smallest = plan;
        }
        if (plan.memory.total() > budget) return;
        ++result.fitting;
        plan.estimate =
            estimate_step(layout_work(model, layout, request.seq_len, sequences, facts), layout.mesh, device);
        auto key = std::make_pair(layout.mesh.to_string(), layout.schedule);
        auto found = best.find(key);
        if (found == best.end() || better(plan, found->second)) {
          plan.estimate.assumptions.clear();  // the same for every plan: kept once, in result.assumptions
          best[key] = std::move(plan);
        }
      });

  if (best.empty()) {
    result.memory_needed_bytes = result.smallest.memory.total() / request.margin;
    result.fewest_devices = result.candidates > 0 ? fewest_devices(model, request, device, cache) : 0;
    result.nothing_fits = nothing_fits_message(result);
    return result;
  }
  std::vector<LayoutPlan> ranked;
  for (auto& [key, plan] : best) ranked.push_back(std::move(plan));
  std::sort(ranked.begin(), ranked.end(), better);
  for (auto& plan : ranked) {
    if (static_cast<int>(result.top.size()) >= request.top) break;
    plan.yaml = layout_yaml(request, model, device, plan);
    try {
      check_layout_yaml(plan.yaml, request.devices);
    } catch (const Error& error) {
      result.refused.push_back(plan.layout.mesh.to_string() + (plan.layout.schedule.empty() ? "" : " " +
                               plan.layout.schedule) + ": " + error.what());
      continue;
    }
    result.top.push_back(std::move(plan));
  }
  return result;
}

}  // namespace titan
