// `titan plan --model`: the search for the fastest parallel layout of a
// model on N devices of a kind. It enumerates dp_replicate x dp_shard x tp
// x pp (schedule, microbatches) x cp (x ep for MoE), activation
// checkpointing and float8, keeps the layouts whose modelled per-device
// memory fits under a margin, ranks them by the step estimate
// (step_estimate.hpp) and writes each top layout as a config that
// `titan config check --world-size N` accepts (each is checked so).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "titan/device_table.hpp"
#include "titan/step_estimate.hpp"

namespace titan {

// A model flavor's sizes, read from its plugin (its Hugging Face config,
// parameter count and FLOPs per token).
struct ModelShape {
  std::string name, flavor;
  int64_t hidden = 0, layers = 0, heads = 0, kv_heads = 0, vocab = 0, max_seq_len = 0;
  int64_t q_dim = 0;   // query width: heads x the score head dim
  int64_t kv_dim = 0;  // mean of the key and value widths (K + V = 2 kv_dim per token)
  int64_t ffn = 0;     // the dense blocks' feed-forward width
  int64_t experts = 0, experts_per_token = 0, expert_ffn = 0, shared_experts = 0, moe_layers = 0;  // 0: dense
  int64_t params = 0;         // all of them, embedding and output head included
  double flops_per_token = 0;  // forward + backward at the planned sequence length
  std::vector<std::pair<std::string, int64_t>> tp_sizes;  // what a TP degree must divide
  bool moe() const { return experts > 0; }
  int64_t expert_params() const { return moe_layers * experts * 3 * hidden * expert_ffn; }
};

// Throws titan::Error naming the model plugins on the path for an unknown
// model, and the plugin's flavors for an unknown flavor.
ModelShape read_model_shape(const std::string& model, const std::string& flavor, int64_t seq_len);

enum class AcMode { none, every_2nd, op, full };
const char* ac_mode_name(AcMode mode);  // "none", "selective 2", "selective op", "full"

struct Layout {
  MeshShape mesh;
  std::string schedule;           // the pipeline schedule; "" without pp
  int64_t local_batch_size = 1;   // sequences per data-parallel rank per step (microbatch)
  int64_t microbatch_size = 1;    // pp: sequences per pipeline microbatch
  int64_t microbatches = 1;       // pp: local_batch_size / microbatch_size
  int64_t accumulation = 1;       // gradient accumulation steps (global batch / (local batch x dp))
  AcMode ac = AcMode::none;
  bool float8 = false;
};

// Bytes one device holds at its peak (the worst pp rank's).
struct MemoryEstimate {
  double state = 0;            // fp32 parameters, gradients and AdamW moments (sharded)
  double gathered_params = 0;  // FSDP's unsharded bf16 params and their gradients in flight
  double activations = 0;      // saved for backward, in-flight microbatches included
  double logits = 0;           // the loss's logits on the last stage
  double overhead = 0;         // CUDA context, NCCL and cuBLAS workspaces
  int64_t pp_rank = 0;         // whose peak this is
  double total() const { return state + gathered_params + activations + logits + overhead; }
};

struct LayoutPlan {
  Layout layout;
  MemoryEstimate memory;
  StepEstimate estimate;
  std::string yaml;  // the config; set for the layouts the search returns
};

struct SearchRequest {
  std::string model, flavor, device;
  int64_t devices = 0, seq_len = 0, global_batch_tokens = 0;
  int top = 5;
  double margin = 0.9;         // a layout fits when its peak is at most this share of the device's memory
  std::string tokenizer_path;  // written into the configs; "" leaves a placeholder (the flavor's vocabulary is planned)
  // Degrees every layout must have (pp, dp_replicate, dp_shard, cp, tp, ep):
  // to see what a given layout is predicted to do.
  std::map<std::string, int64_t> fixed;
};

struct SearchResult {
  SearchRequest request;
  DeviceSpec device;
  ModelShape model;
  std::vector<LayoutPlan> top;  // best first, one per mesh and schedule
  int64_t candidates = 0;       // layouts enumerated (each AC / float8 / batch split counted)
  int64_t fitting = 0;          // of them, those that fit
  std::vector<std::string> refused;      // high-ranked layouts `config check` refused, each with its reason
  std::vector<std::string> assumptions;  // of the memory model and of the step estimate
  // When nothing fits: the smallest layout's peak, the device memory it
  // would need, and the first device count, doubling from N, on which a
  // layout fits (0: none up to 64 N).
  LayoutPlan smallest;
  double memory_needed_bytes = 0;
  int64_t fewest_devices = 0;
  std::string nothing_fits;  // the message; empty when a layout fits
};

SearchResult search_layouts(const SearchRequest& request);

// The config of a layout (YAML text, with the prediction in comments).
std::string layout_yaml(const SearchRequest& request, const ModelShape& model, const DeviceSpec& device,
                        const LayoutPlan& plan);
// What `titan config check --world-size N` checks: the plan, the degrees
// against N, every plugin's validation; throws titan::Error.
void check_layout_yaml(const std::string& yaml, int64_t world_size);

// The result for tools (`titan plan --model ... --json`).
std::string search_result_json(const SearchResult& result);

}  // namespace titan
