// The step-time model: compute at a stated fraction of the peak, each
// mesh dim's traffic on the link its groups sit on, overlap by the rule of
// the parallelism that issues it, the bubble from the schedule.
#include "titan/step_estimate.hpp"

#include <algorithm>
#include <cstdio>
#include <map>

#include <c10/util/StringUtil.h>

#include "titan/error.hpp"

namespace titan {

namespace {

// Canonical dims from inner to outer (Titan's mesh order reversed).
const std::vector<std::string>& inner_to_outer() {
  static const std::vector<std::string> dims{"tp", "cp", "dp_shard", "dp_replicate", "pp"};
  return dims;
}

int64_t degree_of(const MeshShape& mesh, const std::string& dim) {
  if (dim == "tp") return mesh.tp;
  if (dim == "cp") return mesh.cp;
  if (dim == "dp_shard") return mesh.dp_shard;
  if (dim == "dp_replicate") return mesh.dp_replicate;
  return mesh.pp;
}

// The canonical dims a (flattened) dim name spans; empty for ep / efsdp.
std::vector<std::string> span_of(const std::string& dim) {
  static const std::map<std::string, std::vector<std::string>> spans = {
      {"tp", {"tp"}},
      {"cp", {"cp"}},
      {"dp_shard", {"dp_shard"}},
      {"dp_replicate", {"dp_replicate"}},
      {"pp", {"pp"}},
      {"dp", {"dp_replicate", "dp_shard"}},
      {"dp_shard_cp", {"dp_shard", "cp"}},
      {"dp_cp", {"dp_replicate", "dp_shard", "cp"}},
      {"dp_shard_cp_tp", {"dp_shard", "cp", "tp"}},
      {"world", {"pp", "dp_replicate", "dp_shard", "cp", "tp"}},
      {"ep", {}},
      {"efsdp", {}}};
  auto found = spans.find(dim);
  if (found == spans.end()) {
    std::vector<std::string> names;
    for (const auto& [name, span] : spans) names.push_back(name);
    throw Error("step estimate: unknown mesh dim '" + dim + "' (known: " + c10::Join(", ", names) + ")");
  }
  return found->second;
}

bool is_data_parallel(const std::string& dim) {
  return dim == "dp_shard" || dim == "dp_replicate" || dim == "dp" || dim == "dp_shard_cp" || dim == "dp_cp" ||
         dim == "efsdp";
}

// Bytes a ring (or pairwise) algorithm puts on each rank's link per byte of
// the larger buffer.
double wire_factor(const std::string& op, int64_t ranks) {
  const double share = static_cast<double>(ranks - 1) / static_cast<double>(ranks);
  if (op == "all_gather" || op == "reduce_scatter" || op == "all_to_all") return share;
  if (op == "all_reduce") return 2 * share;
  if (op == "send" || op == "broadcast") return 1;
  if (op == "recv") return 0;  // counted at its send
  throw Error("step estimate: unknown collective '" + op +
              "' (known: all_gather, reduce_scatter, all_reduce, all_to_all, send, recv, broadcast)");
}

std::string format(const char* pattern, double value) {
  char text[64];
  std::snprintf(text, sizeof(text), pattern, value);
  return text;
}

std::vector<std::string> assumptions_for(const DeviceSpec& device, const EstimateOptions& options) {
  const double tera = 1e12, giga = 1e9;
  return {
      device.description + ": " + format("%.0f", device.bf16_flops / tera) + " TFLOP/s bf16, " +
          format("%.0f", device.fp8_flops / tera) + " fp8, " + format("%.1f", device.fp32_flops / tera) +
          " fp32 (dense), " + format("%.1f", static_cast<double>(device.memory_bytes) / (1 << 30)) + " GiB at " +
          format("%.2f", device.hbm_bytes_per_s / tera) + " TB/s, " + std::to_string(device.devices_per_node) +
          " per node, " + format("%.0f", device.intra_node_bytes_per_s / giga) + " GB/s per direction within a node, " +
          format("%.0f", device.inter_node_bytes_per_s / giga) + " GB/s between nodes (" + device.source + ")",
      "matmuls and attention run at " + format("%.0f", 100 * device.matmul_efficiency) +
          "% of the bf16 dense peak, elementwise kernels folded in (GPUs: TorchTitan reports 33-39% MFU for Llama "
          "3.1 8B under FSDP on H100 without float8, docs/performance.md; cpu: the measured rate is an achieved one)",
      "float8 matmuls run at " + format("%.0f", 100 * options.float8_efficiency) +
          "% of the fp8 dense peak (1.4x the bf16 rate: the casts and scales eat part of the 2x; with it the "
          "model gives TorchTitan's measured 1.28x for float8 on Llama 3.1 8B under FSDP 8)",
      "collectives reach " + format("%.0f", 100 * options.link_efficiency) + "% of the link bandwidth (ring: " +
          "(n-1)/n of the buffer per rank, twice for all-reduce), plus " +
          format("%.0f", options.intra_node_latency_s * 1e6) + " us per call within a node, " +
          format("%.0f", options.inter_node_latency_s * 1e6) + " us between nodes",
      "a mesh dim runs within a node when the dims inner to it (tp innermost, then cp, dp_shard, dp_replicate, pp) "
      "hold at most " + std::to_string(device.devices_per_node) + " ranks, otherwise at the NIC's bandwidth",
      "FSDP / HSDP gathers and reductions overlap compute but for the first gather and last reduction of each pass; "
      "TP, EP and PP transfers are exposed (async TP off); CP's K/V ring overlaps attention",
      "the pipeline bubble stretches compute and exposed transfers by bubble / (1 - bubble)",
      "memory-bound work outside the matmuls (the optimizer step, context parallelism's merges) moves its bytes "
      "at " + format("%.0f", 100 * options.hbm_efficiency) + "% of the memory bandwidth",
  };
}

}  // namespace

std::string MeshShape::to_string() const {
  std::vector<std::string> parts;
  const std::pair<const char*, int64_t> dims[] = {
      {"pp", pp}, {"dp_replicate", dp_replicate}, {"dp_shard", dp_shard}, {"cp", cp}, {"tp", tp}, {"ep", ep}};
  for (const auto& [name, degree] : dims) {
    if (degree > 1) parts.push_back(std::string(name) + " " + std::to_string(degree));
  }
  return parts.empty() ? "1 device" : c10::Join(" x ", parts);
}

int64_t group_size(const MeshShape& mesh, const std::string& dim) {
  if (dim == "ep") return mesh.ep;
  if (dim == "efsdp") return mesh.dp_shard * mesh.cp * mesh.tp / std::max<int64_t>(1, mesh.ep);
  int64_t ranks = 1;
  for (const auto& canonical : span_of(dim)) ranks *= degree_of(mesh, canonical);
  return ranks;
}

bool within_node(const MeshShape& mesh, const std::string& dim, int64_t devices_per_node) {
  // ep takes the fastest ranks of dp_shard x cp x tp: a group is consecutive ranks.
  if (dim == "ep") return mesh.ep <= devices_per_node;
  const std::vector<std::string> span = dim == "efsdp" ? span_of("dp_shard_cp_tp") : span_of(dim);
  size_t outermost = 0;
  const auto& order = inner_to_outer();
  for (size_t i = 0; i < order.size(); ++i) {
    if (std::find(span.begin(), span.end(), order[i]) != span.end()) outermost = i;
  }
  int64_t ranks = 1;
  for (size_t i = 0; i <= outermost; ++i) ranks *= degree_of(mesh, order[i]);
  return ranks <= devices_per_node;
}

StepEstimate estimate_step(const StepWork& work, const MeshShape& mesh, const DeviceSpec& device,
                           const EstimateOptions& options) {
  StepEstimate estimate;
  estimate.assumptions = assumptions_for(device, options);
  const double peak = work.float32_matmuls ? device.fp32_flops : device.bf16_flops;
  const double matmul_rate = peak * device.matmul_efficiency;
  const double float8_rate = std::max(device.fp8_flops * options.float8_efficiency, matmul_rate);
  estimate.compute_s = (work.flops - work.float8_flops) / matmul_rate + work.float8_flops / float8_rate +
                       work.hbm_bytes / (device.hbm_bytes_per_s * options.hbm_efficiency);
  const double attention_s = work.attention_flops / matmul_rate;

  // Per dim: its traffic on its link. Data-parallel dims on different links
  // (NVLink, NIC) run side by side; on one link they queue.
  std::map<std::string, CommTime> by_dim;
  for (const auto& traffic : work.traffic) {
    const int64_t ranks = group_size(mesh, traffic.dim);
    if (ranks <= 1 || traffic.bytes <= 0) continue;
    CommTime& time = by_dim[traffic.dim];
    time.dim = traffic.dim;
    time.ranks = ranks;
    time.within_node = within_node(mesh, traffic.dim, device.devices_per_node);
    time.overlap = is_data_parallel(traffic.dim) ? "compute" : traffic.dim == "cp" ? "attention" : "none";
    const double bandwidth =
        (time.within_node ? device.intra_node_bytes_per_s : device.inter_node_bytes_per_s) * options.link_efficiency;
    const double latency = time.within_node ? options.intra_node_latency_s : options.inter_node_latency_s;
    const double wire = traffic.bytes * wire_factor(traffic.op, ranks);
    time.bytes_on_wire += wire;
    time.seconds += wire / bandwidth + static_cast<double>(traffic.calls) * latency;
  }
  double data_parallel_intra = 0, data_parallel_inter = 0, stretched = 0;
  for (auto& [dim, time] : by_dim) {
    if (time.overlap == "compute") {
      (time.within_node ? data_parallel_intra : data_parallel_inter) += time.seconds;
    } else if (time.overlap == "attention") {
      stretched += std::max(0.0, time.seconds - attention_s);
    } else {
      stretched += time.seconds;
    }
    estimate.comm.push_back(time);
  }
  const double data_parallel = std::max(data_parallel_intra, data_parallel_inter);
  const double units = static_cast<double>(std::max<int64_t>(1, work.overlap_units));
  const double data_parallel_exposed =
      std::max(data_parallel / units, data_parallel - estimate.compute_s * (1 - 1 / units));

  const double bubble = std::clamp(work.bubble_fraction, 0.0, 0.99);
  estimate.bubble_s = (estimate.compute_s + stretched) * bubble / (1 - bubble);
  estimate.exposed_comm_s = stretched + data_parallel_exposed;
  estimate.step_s = estimate.compute_s + estimate.exposed_comm_s + estimate.bubble_s;
  if (estimate.step_s > 0) {
    estimate.tokens_per_s = work.tokens / estimate.step_s;
    estimate.tokens_per_s_per_device = estimate.tokens_per_s / static_cast<double>(mesh.world());
    estimate.mfu = work.model_flops / (estimate.step_s * peak);
  }
  return estimate;
}

}  // namespace titan
