// The core sections of a run's YAML, with TorchTitan's knob names. Plugin
// sections (model, optimizer, lr_scheduler, checkpoint, plugins[*]) are
// read by the plugins themselves, except model.tokenizer_path (the
// tokenizer, not the model, decides the vocabulary) and
// model.attn_mask_type (the data decides where documents begin).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "titan/config.hpp"

namespace titan {

struct JobConfig {
  std::string dump_folder = "./outputs";
  std::string description;
  std::vector<std::string> plugin_path;  // extra plugin folders
};

// An element of training.datasets: a source of a weighted mixture.
struct DatasetSourceConfig {
  std::string path;  // a file, a folder of shards or a glob
  double weight = 1.0;
  std::string text_field = "text";
  std::string chat_template = "none";
};

struct TrainingConfig {
  int64_t local_batch_size = 8;
  int64_t global_batch_size = -1;  // -1: local * data-parallel degree (no accumulation)
  int64_t seq_len = 2048;
  int64_t steps = 10000;
  double max_norm = 1.0;
  std::string dataset = "stories";
  std::string dataset_path;  // overrides `dataset` when set: a file, a folder of shards or a glob
  std::string text_field = "text";  // the documents' JSONL field or Parquet column
  std::vector<DatasetSourceConfig> datasets;  // a weighted mixture; overrides dataset and dataset_path
  int64_t seed = 0;
  bool deterministic = false;
  std::string device = "cpu";
  int64_t threads = 0;  // CPU intra-op threads; 0 = all cores
  std::string cpu_allocator = "caching";  // or "system" (glibc's defaults)
  std::string mixed_precision_param = "float32";
  std::string mixed_precision_reduce = "float32";
  std::string on_nonfinite_loss = "error";  // or "skip"
  // The label of a document's last token (the next document's first) carries no loss.
  bool ignore_cross_document_labels = false;
  std::string packing = "concat_then_split";  // or carry, first_fit (titan/data.hpp's Packing)
  std::string chat_template = "none";  // or llama3, chatml: the dataset holds conversations (SFT)
  // Forward + backward replayed from a CUDA graph: automatic = on CUDA
  // wherever the run allows it (off, with the reason logged, where not);
  // on = required (a run that does not allow it is refused); off = never.
  enum class CudaGraph { automatic, on, off };
  CudaGraph cuda_graph = CudaGraph::automatic;
  int64_t cuda_graph_warmup_steps = 3;
};

struct MetricsConfig {
  int64_t log_freq = 10;
  bool enable_jsonl = true;
  std::string progress = "auto";  // auto: a live line on a terminal, the ETA in log lines; off: neither
  // FLOP/s per device that MFU divides by. 0: the GPU's datasheet peak from
  // its name for training.mixed_precision_param (0, so MFU 0, for an
  // unknown GPU), or measured at start on CPU.
  double peak_flops = 0;
  // Every rank writes its own metrics (metrics.rank<r>.jsonl, and a sink's
  // per-rank files); otherwise rank 0 writes the job's.
  bool save_for_all_ranks = false;
};

struct CommConfig {
  int64_t init_timeout_seconds = 300;
  int64_t train_timeout_seconds = 100;
  bool verify_collectives = false;
  // > 0: also every this many steps, each step's collectives since the last
  // check (implies verify_collectives); 0: the first step only.
  int64_t verify_collectives_interval = 0;
};

struct DebugConfig {
  int64_t inject_nonfinite_loss_at_step = -1;  // test hook: this step's loss is taken as NaN
  std::string save_final_model;  // rank 0 writes the gathered final parameters here ("" none)
  bool exit_after_init = false;  // dry run: stop once the model is initialized
  int64_t crash_rank = -1;  // test hook: SIGKILL this rank ...
  int64_t crash_at_step = -1;  // ... once this step (and its checkpoint) is done
  int64_t inject_out_of_memory_at_step = -1;  // test hook: this step's forward asks the allocator for 1 PiB
  // Count the host's reads of tensor values in each step (metrics.jsonl
  // `host_reads`: those of the steps between log steps; a warning names the
  // sites). Costs a RecordFunction callback on every op.
  bool count_host_reads = false;
};

// TorchTitan's profiling section: every profile_freq steps, profiler_warmup
// steps of warm-up then profiler_active recorded steps; each rank writes
// <dump_folder>/<save_traces_folder>/iteration_<step>/rank<r>_trace.json.
// With enable_memory_snapshot each rank also writes, every profile_freq
// steps and when a step runs out of memory, <dump_folder>/
// <save_memory_snapshot_folder>/iteration_<step>[_exit]/rank<r>_memory_snapshot
// .pickle (CUDA) or .json (CPU) (docs/memory_snapshot.md).
struct ProfilingConfig {
  bool enable_profiling = false;
  std::string save_traces_folder = "profile_traces";
  int64_t profile_freq = 10;
  int64_t profiler_warmup = 3;
  int64_t profiler_active = 1;
  bool enable_memory_snapshot = false;
  std::string save_memory_snapshot_folder = "memory_snapshot";
};

// TorchTitan's validation section: every `freq` steps, a no-grad pass in
// eval mode over a held-out set, from its start each time.
struct ValidationConfig {
  bool enable = false;
  std::string dataset = "stories_validation";  // a built-in held-out set, or see dataset_path
  std::string dataset_path;                    // a file (as training.dataset_path); wins over dataset
  std::string chat_template;                   // training.chat_template unless set
  std::string text_field;                      // training.text_field unless set
  int64_t freq = 10;
  int64_t steps = -1;             // batches per validation; -1: the whole set once
  int64_t local_batch_size = 0;   // 0: training.local_batch_size
  int64_t seq_len = 0;            // 0: training.seq_len
};

// TorchTitan's fault_tolerance section (torchft): this launch is one replica
// group of several; torchft's Lighthouse admits the live groups each step
// (core/src/ft/replica_groups.hpp, docs/reliability.md).
struct FaultToleranceConfig {
  bool enable = false;
  int64_t replica_id = 0;        // this group's, in [0, group_size)
  int64_t group_size = 1;        // replica groups in the job: the data is split over them
  int64_t min_replica_size = 1;  // never step with fewer groups
  std::string lighthouse;        // the Lighthouse's address (TORCHFT_LIGHTHOUSE when unset)
  std::string address;           // where the other groups reach this rank ("": the route to the Lighthouse)
  int64_t quorum_timeout_seconds = 60;
  int64_t timeout_seconds = 10;  // each collective across groups, and joining them
  int64_t heartbeat_interval_ms = 100;
};

struct CoreConfig {
  JobConfig job;
  TrainingConfig training;
  MetricsConfig metrics;
  ProfilingConfig profiling;
  ValidationConfig validation;
  CommConfig comm;
  DebugConfig debug;
  FaultToleranceConfig fault_tolerance;
  std::string tokenizer_path;

  // Where this launch writes its own files (config.resolved.yaml, metrics,
  // traces, snapshots, TensorBoard, flight recorder): job.dump_folder, or
  // its ft-replica-<id> folder when the launch is one replica group of a
  // fault-tolerant job. The groups share one config, hence one dump_folder,
  // and its checkpoints (written by one group at a time).
  std::string run_folder() const {
    if (!fault_tolerance.enable) return job.dump_folder;
    return job.dump_folder + "/ft-replica-" + std::to_string(fault_tolerance.replica_id);
  }
  // model.attn_mask_type (TorchTitan's knob): a query sees every earlier
  // token of its window, or only those of its own document.
  bool block_causal = false;
};

// Reads the core sections (and model.tokenizer_path), validating values.
CoreConfig read_core_config(const ConfigNode& root);

}  // namespace titan
