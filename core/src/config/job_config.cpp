// Reads and validates the core sections of a run config.
#include "titan/job_config.hpp"

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "titan/error.hpp"

namespace titan {

namespace {

// training.chat_template's names (titan/data.hpp's ChatTemplate).
const std::vector<std::string> kChatTemplates = {"none", "llama3", "chatml"};

void require_positive(const ConfigNode& node, const std::string& key, int64_t value) {
  if (value <= 0) node.fail(key, "expected a positive integer, got " + std::to_string(value));
}

// A folder the run writes inside job.dump_folder: relative, and not
// climbing out of it.
void check_folder_under_dump(const ConfigNode& node, const std::string& key, const std::string& folder) {
  const std::filesystem::path path(folder);
  bool climbs = false;
  for (const auto& part : path) climbs = climbs || part == "..";
  if (folder.empty() || path.is_absolute() || climbs) {
    node.fail(key, "expected a folder name inside job.dump_folder (e.g. memory_snapshot), got '" + folder +
                       "'; to write elsewhere, set job.dump_folder");
  }
}

}  // namespace

CoreConfig read_core_config(const ConfigNode& root) {
  CoreConfig config;
  ConfigNode job = root.child("job");
  config.job.dump_folder = job.get<std::string>("dump_folder", "./outputs", "folder for logs, metrics, checkpoints");
  config.job.description = job.get<std::string>("description", "", "free text shown in the log");
  config.job.plugin_path = job.get<std::vector<std::string>>("plugin_path", {}, "extra folders searched for plugins");

  ConfigNode training = root.child("training");
  auto& t = config.training;
  t.local_batch_size = training.get<int64_t>("local_batch_size", 8, "sequences per data-parallel rank per microbatch");
  require_positive(training, "local_batch_size", t.local_batch_size);
  t.global_batch_size = training.get<int64_t>("global_batch_size", -1,
                                              "sequences per step over all ranks; -1 = no gradient accumulation");
  if (t.global_batch_size == 0 || t.global_batch_size < -1) {
    training.fail("global_batch_size", "expected -1 or a positive integer, got " + std::to_string(t.global_batch_size));
  }
  t.seq_len = training.get<int64_t>("seq_len", 2048, "tokens per sequence");
  require_positive(training, "seq_len", t.seq_len);
  t.steps = training.get<int64_t>("steps", 10000, "training steps");
  require_positive(training, "steps", t.steps);
  t.max_norm = training.get<double>("max_norm", 1.0, "gradient clipping max global norm; <= 0 disables");
  t.dataset = training.get<std::string>("dataset", "stories", "built-in dataset name (stories)");
  t.dataset_path = training.get<std::string>(
      "dataset_path", "",
      "a data file, a folder of shards or a glob (*.jsonl[.gz|.zst], *.parquet, *.txt, *.bin, ...); overrides dataset");
  t.text_field = training.get<std::string>("text_field", "text", "the documents' JSONL field or Parquet column");
  t.seed = training.get<int64_t>("seed", 0, "random seed for init and data-independent randomness");
  t.deterministic = training.get<bool>("deterministic", false, "use deterministic algorithms only");
  t.device = training.choice("device", "cpu", {"cpu", "cuda"}, "where to train");
  t.threads = training.get<int64_t>("threads", 0, "CPU intra-op threads; 0 = OMP_NUM_THREADS where set (titan launch sets cores / local ranks), else all cores");
  if (t.threads < 0) training.fail("threads", "expected >= 0, got " + std::to_string(t.threads));
  t.cpu_allocator = training.choice(
      "cpu_allocator", "caching", {"caching", "system"},
      "host memory: caching = freed tensor memory stays in the process for the next step (no page faults "
      "again); system = glibc's defaults, which return it to the OS");
  t.mixed_precision_param = training.choice("mixed_precision_param", "float32", {"float32", "bfloat16"},
                                            "dtype of parameters in compute (FSDP)");
  t.mixed_precision_reduce = training.choice("mixed_precision_reduce", "float32", {"float32", "bfloat16"},
                                             "dtype of gradient reduction (FSDP)");
  t.on_nonfinite_loss = training.choice("on_nonfinite_loss", "error", {"error", "skip"},
                                        "NaN/inf loss: stop with an error, or skip the optimizer step");
  t.ignore_cross_document_labels = training.get<bool>(
      "ignore_cross_document_labels", false,
      "the label of a document's last token (the next document's first token) carries no loss; the loss is then "
      "normalized over the labels that do");
  t.packing = training.choice("packing", "concat_then_split", {"concat_then_split", "carry", "first_fit"},
                              "how documents become windows: concat_then_split = one stream cut every seq_len + 1 "
                              "tokens (a document continues in the next window); carry = whole documents in order, "
                              "one that does not fit starts the next window; first_fit = whole documents into the "
                              "first of 8 open windows with room; padding carries no loss, and a document longer "
                              "than a window is cut in every mode");
  t.chat_template = training.choice("chat_template", "none", kChatTemplates,
                                    "supervised fine-tuning: each JSON line of the dataset is a conversation "
                                    "{\"messages\": [{\"role\", \"content\"}, ...]} rendered with Llama 3's or "
                                    "ChatML's template; only the assistant's replies carry loss (docs/data.md)");
  for (const ConfigNode& entry : training.children("datasets")) {
    DatasetSourceConfig source;
    source.path = entry.require<std::string>("path", "a file, a folder of shards or a glob");
    source.weight = entry.get<double>("weight", 1.0,
                                      "relative: each document comes from this source with probability weight / sum");
    if (!(source.weight > 0) || !std::isfinite(source.weight)) {
      entry.fail("weight", "expected a positive number, got " + std::to_string(source.weight));
    }
    source.text_field = entry.get<std::string>("text_field", t.text_field, "its JSONL field or Parquet column");
    source.chat_template = entry.choice("chat_template", t.chat_template, kChatTemplates,
                                        "its conversations' template (as training.chat_template)");
    t.datasets.push_back(source);
  }
  using CudaGraph = TrainingConfig::CudaGraph;
  t.cuda_graph = training.choice(
      "cuda_graph", CudaGraph::automatic,
      {{"auto", CudaGraph::automatic}, {"true", CudaGraph::on}, {"false", CudaGraph::off}},
      "capture the forward and backward passes into a CUDA graph after cuda_graph_warmup_steps eager steps and "
      "replay it every step: auto = on CUDA wherever the run allows it (one rank, no device mesh, no pipeline, no "
      "MoE routing, fixed shapes and loss weights; the log says why not), true = required, false = never");
  t.cuda_graph_warmup_steps = training.get<int64_t>(
      "cuda_graph_warmup_steps", 3,
      "eager steps before the CUDA graph is captured (at least 1: cuBLAS and autograd set up lazily, outside it)");
  require_positive(training, "cuda_graph_warmup_steps", t.cuda_graph_warmup_steps);
  if (t.cuda_graph == CudaGraph::on && t.device != "cuda") {
    training.fail("cuda_graph", "a CUDA graph needs training.device=cuda (device is '" + t.device +
                                    "'); set training.cuda_graph=false to train on " + t.device);
  }

  ConfigNode metrics = root.child("metrics");
  auto& m = config.metrics;
  m.log_freq = metrics.get<int64_t>("log_freq", 10, "log every N steps");
  require_positive(metrics, "log_freq", m.log_freq);
  m.enable_jsonl = metrics.get<bool>("enable_jsonl", true, "write metrics.jsonl under dump_folder");
  m.progress = metrics.choice("progress", m.progress, {"auto", "off"},
                              "auto: rank 0 keeps a live step/ETA line on a terminal, and log lines end with the "
                              "ETA; off: neither");
  m.peak_flops = metrics.get<double>("peak_flops", 0.0, "peak FLOP/s per device for MFU; 0 = the GPU's datasheet peak (H100, H200, A100, B200) for training.mixed_precision_param, or measured on CPU");
  if (m.peak_flops < 0) metrics.fail("peak_flops", "expected >= 0");
  m.save_for_all_ranks = metrics.get<bool>("save_for_all_ranks", false, "every rank writes its metrics (metrics.rank<r>.jsonl, per-rank TensorBoard folders), not only rank 0");

  ConfigNode profiling = root.child("profiling");
  auto& p = config.profiling;
  p.enable_profiling = profiling.get<bool>("enable_profiling", p.enable_profiling,
                                           "write Chrome traces of some steps (LibTorch's profiler)");
  p.save_traces_folder = profiling.get<std::string>("save_traces_folder", p.save_traces_folder,
                                                    "trace folder under dump_folder");
  p.profile_freq = profiling.get<int64_t>("profile_freq", p.profile_freq, "a trace every N steps");
  p.profiler_warmup = profiling.get<int64_t>("profiler_warmup", p.profiler_warmup,
                                             "steps the profiler runs unrecorded before each trace");
  p.profiler_active = profiling.get<int64_t>("profiler_active", p.profiler_active, "steps each trace records");
  p.enable_memory_snapshot = profiling.get<bool>(
      "enable_memory_snapshot", p.enable_memory_snapshot,
      "every profile_freq steps and on out-of-memory, each rank writes what fills its memory (the CUDA caching "
      "allocator's history for pytorch.org/memory_viz, or on CPU a JSON timeline by phase and the largest live "
      "allocations)");
  p.save_memory_snapshot_folder = profiling.get<std::string>(
      "save_memory_snapshot_folder", p.save_memory_snapshot_folder, "memory snapshot folder under dump_folder");
  require_positive(profiling, "profile_freq", p.profile_freq);
  require_positive(profiling, "profiler_active", p.profiler_active);
  if (p.profiler_warmup < 0) profiling.fail("profiler_warmup", "expected >= 0");
  if (p.save_traces_folder.empty()) profiling.fail("save_traces_folder", "expected a folder name");
  check_folder_under_dump(profiling, "save_memory_snapshot_folder", p.save_memory_snapshot_folder);
  // Only the profiler has a warm-up and recorded steps; memory snapshots
  // alone take any period.
  if (p.enable_profiling && p.profile_freq < p.profiler_warmup + p.profiler_active) {
    profiling.fail("profile_freq", std::to_string(p.profile_freq) + " is less than profiler_warmup (" +
                                       std::to_string(p.profiler_warmup) + ") + profiler_active (" +
                                       std::to_string(p.profiler_active) +
                                       "): each trace's warm-up and recorded steps must fit in one period; raise "
                                       "profile_freq or lower the other two");
  }

  ConfigNode validation = root.child("validation");
  auto& v = config.validation;
  v.enable = validation.get<bool>("enable", v.enable, "a validation pass every freq steps");
  v.dataset = validation.get<std::string>("dataset", v.dataset,
                                          "held-out set: stories_validation (built in) or a file as in dataset_path");
  v.dataset_path = validation.get<std::string>("dataset_path", v.dataset_path, "a held-out file; wins over dataset");
  v.chat_template = validation.choice("chat_template", t.chat_template, kChatTemplates,
                                      "how the held-out file is read (as training.chat_template, its default)");
  v.text_field = validation.get<std::string>("text_field", t.text_field, "the held-out file's JSONL field or Parquet column");
  v.freq = validation.get<int64_t>("freq", v.freq, "validate every N steps");
  v.steps = validation.get<int64_t>("steps", v.steps, "batches per validation; -1: the whole set once");
  v.local_batch_size = validation.get<int64_t>("local_batch_size", v.local_batch_size,
                                               "sequences per rank and batch (0: training.local_batch_size)");
  v.seq_len = validation.get<int64_t>("seq_len", v.seq_len, "tokens per sequence (0: training.seq_len)");
  require_positive(validation, "freq", v.freq);
  if (v.steps == 0 || v.steps < -1) validation.fail("steps", "expected a count >= 1, or -1 for the whole set once");
  if (v.local_batch_size < 0) validation.fail("local_batch_size", "expected >= 1, or 0 for training.local_batch_size");
  if (v.seq_len < 0) validation.fail("seq_len", "expected >= 1, or 0 for training.seq_len");
  if (v.local_batch_size == 0) v.local_batch_size = t.local_batch_size;
  if (v.seq_len == 0) v.seq_len = t.seq_len;

  ConfigNode comm = root.child("comm");
  auto& c = config.comm;
  c.init_timeout_seconds = comm.get<int64_t>("init_timeout_seconds", 300, "rendezvous timeout");
  require_positive(comm, "init_timeout_seconds", c.init_timeout_seconds);
  c.train_timeout_seconds = comm.get<int64_t>("train_timeout_seconds", 100, "timeout of each collective");
  require_positive(comm, "train_timeout_seconds", c.train_timeout_seconds);
  c.verify_collectives = comm.get<bool>("verify_collectives", false, "compare collective sequences across ranks");
  c.verify_collectives_interval = comm.get<int64_t>(
      "verify_collectives_interval", 0,
      "debug: also compare each group's collectives every this many steps (0: the first step only; > 0 implies "
      "verify_collectives)");
  if (c.verify_collectives_interval < 0) {
    comm.fail("verify_collectives_interval", "must be >= 0 (0: only the first step is compared), got " +
                                                 std::to_string(c.verify_collectives_interval));
  }
  if (c.verify_collectives_interval > 0) c.verify_collectives = true;

  config.debug.count_host_reads = root.child("debug").get<bool>(
      "count_host_reads", false,
      "count the host's reads of tensor values per step (metrics.jsonl host_reads; a warning names the sites)");
  config.debug.inject_nonfinite_loss_at_step = root.child("debug").get<int64_t>(
      "inject_nonfinite_loss_at_step", -1, "test hook: treat this step's loss as NaN");
  config.debug.crash_rank = root.child("debug").get<int64_t>(
      "crash_rank", -1, "test hook: this rank kills itself with SIGKILL after debug.crash_at_step");
  config.debug.crash_at_step = root.child("debug").get<int64_t>("crash_at_step", -1, "test hook: see crash_rank");
  config.debug.inject_out_of_memory_at_step = root.child("debug").get<int64_t>(
      "inject_out_of_memory_at_step", -1,
      "test hook: this step's forward asks the allocator for 1 PiB, which it refuses (a real out-of-memory error)");
  config.debug.exit_after_init = root.child("debug").get<bool>(
      "exit_after_init", false, "build, parallelize and initialize the model, log its memory, then stop (a dry run)");
  config.debug.save_final_model = root.child("debug").get<std::string>(
      "save_final_model", "", "after training, rank 0 writes every full (gathered) parameter and MoE expert bias to this file "
      "(LibTorch pickle of a name -> tensor dict), e.g. to compare parallel layouts");

  ConfigNode ft = root.child("fault_tolerance");
  auto& f = config.fault_tolerance;
  f.enable = ft.get<bool>("enable", false, "this launch is one replica group; torchft's Lighthouse admits the live "
                                           "groups each step (docs/reliability.md)");
  // torchft's launcher (and `titan launch --replica-group-id`) say it in the environment.
  auto from_environment = [&](const char* name, int64_t fallback) -> int64_t {
    const char* text = std::getenv(name);
    if (!text || !*text) return fallback;
    char* end = nullptr;
    const long long value = std::strtoll(text, &end, 10);
    if (*end != '\0' || value < 0) {
      throw Error(std::string("environment variable ") + name + "='" + text + "': expected an integer >= 0");
    }
    return value;
  };
  f.replica_id = ft.get<int64_t>("replica_id", from_environment("REPLICA_GROUP_ID", 0),
                                 "this replica group's id, in [0, group_size) (default: REPLICA_GROUP_ID)");
  f.group_size = ft.get<int64_t>("group_size", from_environment("NUM_REPLICA_GROUPS", 1),
                                 "replica groups in the job, the data split over them (default: NUM_REPLICA_GROUPS)");
  f.min_replica_size = ft.get<int64_t>("min_replica_size", 1, "never train with fewer live replica groups");
  const char* lighthouse_env = std::getenv("TORCHFT_LIGHTHOUSE");
  f.lighthouse = ft.get<std::string>("lighthouse", lighthouse_env ? lighthouse_env : "",
                                     "the Lighthouse's address, http://host:port (default: TORCHFT_LIGHTHOUSE)");
  f.address = ft.get<std::string>("address", "",
                                  "where the other groups reach this rank (default: its address on the route to the "
                                  "Lighthouse, or GLOO_SOCKET_IFNAME's interface)");
  f.quorum_timeout_seconds = ft.get<int64_t>("quorum_timeout_seconds", 60, "the longest wait for a quorum");
  f.timeout_seconds = ft.get<int64_t>("timeout_seconds", 10, "each collective across replica groups");
  f.heartbeat_interval_ms = ft.get<int64_t>("heartbeat_interval_ms", 100, "heartbeats to the Lighthouse");
  if (f.enable) {
    require_positive(ft, "group_size", f.group_size);
    require_positive(ft, "quorum_timeout_seconds", f.quorum_timeout_seconds);
    require_positive(ft, "timeout_seconds", f.timeout_seconds);
    require_positive(ft, "heartbeat_interval_ms", f.heartbeat_interval_ms);
    if (f.replica_id < 0 || f.replica_id >= f.group_size) {
      ft.fail("replica_id", "expected an id in [0, group_size = " + std::to_string(f.group_size) + "), got " +
                                std::to_string(f.replica_id));
    }
    if (f.min_replica_size < 1 || f.min_replica_size > f.group_size) {
      ft.fail("min_replica_size", "expected 1 to group_size (" + std::to_string(f.group_size) + "), got " +
                                      std::to_string(f.min_replica_size));
    }
    if (f.lighthouse.empty()) {
      ft.fail("lighthouse", "no Lighthouse address: set fault_tolerance.lighthouse or TORCHFT_LIGHTHOUSE "
                            "(http://host:29510), and start one: scripts/lighthouse.py --min_replicas N");
    }
  }

  config.tokenizer_path = root.child("model").get<std::string>(
      "tokenizer_path", "assets/tokenizer/stories_bpe.json", "tokenizer file (tiktoken, tokenizer.json, or 'bytes')");
  config.block_causal =
      root.child("model").choice("attn_mask_type", "causal", {"causal", "block_causal"},
                                 "causal: a token attends to every earlier token of its window; block_causal: only to "
                                 "those of its own document (documents begin at BOS and after EOS), its rotary "
                                 "positions restarting at each document") == "block_causal";
  return config;
}

}  // namespace titan
