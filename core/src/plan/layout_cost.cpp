// The per-device model of a layout as Titan runs it (not as an ideal
// framework would): FSDP reduce-scatters after every microbatch's backward,
// but under a pipeline gathers and reduce-scatters once a step, holding
// each block's weights and fp32 gradients from its first forward to the
// step's last backward (FSDP2's behaviour there);
// sequence parallelism is off under a pipeline; the zero-bubble schedules
// run the whole backward in I under FSDP and activation checkpointing; the
// per-op selective mode keeps each attention's softmax weights.
#include "layout_cost.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "titan/pipeline_program.hpp"
#include "titan/registry.hpp"

namespace titan {

namespace {

constexpr double kBf16 = 2, kFp32 = 4;
constexpr double kGiB = 1024.0 * 1024 * 1024;
// Adam's fp32 master weight, gradient and two moments.
constexpr double kStateBytesPerParam = 4 * kFp32;
// The loss at its peak per logit: bf16 logits, their fp32 copy and
// log-softmax, and the fp32 gradient (cross_entropy_loss in float32).
constexpr double kLogitBytes = 2 + 4 + 4 + 4;

// Where a layout's parameters sit, per block and at the model's two ends.
struct ParamSplit {
  double dense_per_block = 0, expert_per_block = 0;
  double embedding = 0, head = 0;  // the output head with the final norm
};

ParamSplit split_params(const ModelShape& model) {
  ParamSplit split;
  const double d = static_cast<double>(model.hidden), vocab = static_cast<double>(model.vocab);
  split.embedding = vocab * d;
  split.head = vocab * d + d;
  const double experts = static_cast<double>(model.expert_params());
  const double blocks = static_cast<double>(model.params) - split.embedding - split.head;
  split.dense_per_block = std::max(0.0, blocks - experts) / static_cast<double>(model.layers);
  split.expert_per_block = experts / static_cast<double>(model.layers);
  return split;
}

// Blocks per stage by the pipeline plugin's split rule: the layer units
// (blocks + the embedding and the output head, one unit each) spread
// evenly, the first stages taking the remainder; the first and the last
// stage hold one block fewer for their end of the model.
std::vector<int64_t> stage_blocks(int64_t layers, int64_t stages) {
  const int64_t units = layers + 2;
  std::vector<int64_t> blocks;
  for (int64_t stage = 0; stage < stages; ++stage) {
    int64_t count = units / stages + (stage < units % stages ? 1 : 0);
    if (stage == 0) --count;
    if (stage == stages - 1) --count;
    blocks.push_back(count);
  }
  return blocks;
}

bool sequence_parallel(const Layout& layout) { return layout.mesh.tp > 1 && layout.mesh.pp == 1; }

// Expert weights are split over ep when there is one, else over tp (their width).
double expert_split(const Layout& layout) {
  return static_cast<double>(layout.mesh.ep > 1 ? layout.mesh.ep : layout.mesh.tp);
}

// bf16 elements one block saves per token (on one tp rank) for its backward.
struct ActivationElements {
  double plain = 0;  // no checkpointing
  double input = 0;  // a checkpointed block keeps only its input
  double per_op = 0; // per-op selective: every other linear's output, attention's output and softmax weights
};

ActivationElements activation_elements(const ModelShape& model, const Layout& layout, int64_t seq_len) {
  const double d = static_cast<double>(model.hidden), tp = static_cast<double>(layout.mesh.tp);
  const double q = static_cast<double>(model.q_dim), kv = static_cast<double>(model.kv_dim);
  const double heads = static_cast<double>(model.heads), layers = static_cast<double>(model.layers);
  const double norm_split = sequence_parallel(layout) ? tp : 1;
  // Two norms (input and output each); attention keeps the rotated q, k
  // and v, its output twice (its own and the out-projection's input) and
  // its fp32 log-sum-exp; SwiGLU keeps gate, up, silu(gate) and their
  // product.
  const double norms = 4 * d;
  const double attention = 3 * q + 2 * kv + 2 * heads;
  const double moe_layers = static_cast<double>(model.moe_layers);
  const double dense_ffn = 4 * static_cast<double>(model.ffn);
  double moe_ffn = 0;
  if (model.moe()) {
    const double k = static_cast<double>(model.experts_per_token), f = static_cast<double>(model.expert_ffn);
    // Router scores (fp32), each token's k routed copies in and out of the
    // experts, the experts' SwiGLU, the shared experts'.
    moe_ffn = 2 * static_cast<double>(model.experts) + k * (2 * d + 4 * f) +
              4 * static_cast<double>(model.shared_experts) * f;
  }
  const double ffn = ((layers - moe_layers) * dense_ffn + moe_layers * moe_ffn) / layers;
  ActivationElements elements;
  elements.plain = norms / norm_split + (attention + ffn) / tp;
  elements.input = d / norm_split;
  const double dense_share = (layers - moe_layers) / layers;
  elements.per_op = elements.input + (2 * q + kv + dense_share * static_cast<double>(model.ffn)) / tp +
                    d / norm_split + heads / tp * static_cast<double>(seq_len);
  return elements;
}

double saved_elements(const ActivationElements& elements, AcMode mode) {
  switch (mode) {
    case AcMode::none: return elements.plain;
    case AcMode::every_2nd: return (elements.plain + elements.input) / 2;
    case AcMode::op: return elements.per_op;
    case AcMode::full: return elements.input;
  }
  return elements.plain;
}

// Extra forward work per unit of a block's forward + backward (3 units).
struct Recompute {
  double linear = 0, attention = 0;
  double tp_forwards = 0;  // extra forward passes' worth of TP collectives
};
Recompute recompute_of(AcMode mode) {
  switch (mode) {
    case AcMode::none: return {0, 0, 0};
    case AcMode::every_2nd: return {1.0 / 6, 1.0 / 6, 0.5};
    // Half the linears run again; attention is replayed from its saved
    // weights; layers TP wrapped are recomputed whole.
    case AcMode::op: return {1.0 / 6, 0, 1};
    case AcMode::full: return {1.0 / 3, 1.0 / 3, 1};
  }
  return {};
}

double tokens_per_microbatch(const Layout& layout, int64_t seq_len) {
  const int64_t sequences = layout.mesh.pp > 1 ? layout.microbatch_size : layout.local_batch_size;
  return static_cast<double>(sequences * seq_len) / static_cast<double>(layout.mesh.cp);
}

double edge_params(const ParamSplit& split, const PipelineFacts& pipeline, size_t rank) {
  return (pipeline.holds_first[rank] ? split.embedding : 0) + (pipeline.holds_last[rank] ? split.head : 0);
}

// Bytes per gathered parameter: FSDP's float8 all-gather (tensorwise, no
// TP) moves and keeps 1-byte codes.
double gathered_bytes(const Layout& layout) { return layout.float8 && layout.mesh.tp == 1 ? 1 : kBf16; }

}  // namespace

std::string gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f GiB", bytes / (1024.0 * 1024 * 1024));
  return text;
}

PipelineFacts no_pipeline(int64_t layers) {
  PipelineFacts facts;
  facts.blocks = facts.peak_block_microbatches = {layers};
  facts.holds_first = facts.holds_last = {true};
  return facts;
}

int64_t backward_ticks(AcMode mode) {
  switch (mode) {
    case AcMode::none: return 4;
    case AcMode::every_2nd: return 5;
    case AcMode::op: return 5;
    case AcMode::full: return 6;
  }
  return 4;
}

std::optional<PipelineFacts> pipeline_facts(const std::string& schedule_name, int64_t pp, int64_t microbatches,
                                            int64_t backward, int64_t layers, std::string& why) {
  PluginContext context;
  context.options = ConfigNode::parse("{}", "<titan plan>");
  auto schedule = PluginRegistry::instance().create_pipeline_schedule(schedule_name, context);
  PipelineShape shape;
  shape.ranks = pp;
  shape.stages = pp * schedule->stages_per_rank().min;
  shape.microbatches = microbatches;
  const std::vector<int64_t> blocks = stage_blocks(layers, shape.stages);
  if (*std::min_element(blocks.begin(), blocks.end()) < 1) {
    why = std::to_string(shape.stages) + " stages leave a stage of " + std::to_string(layers) + " blocks empty";
    return std::nullopt;
  }
  try {
    PipelineProgram program = compile_pipeline(*schedule, shape);
    // FSDP's and checkpointing's hooks keep the weight gradients in I
    // (Parallelizer::allows_split_backward), so W costs nothing here.
    ActionCosts costs;
    costs.forward = 2;
    costs.backward_input = costs.full_backward = backward;
    costs.backward_weight = 0;
    PipelineTimeline timeline = check_pipeline(program.actions, program.placement, shape, program.name, costs);
    PipelineFacts facts;
    facts.stages_per_rank = schedule->stages_per_rank().min;
    facts.bubble_fraction = timeline.bubble_fraction;
    for (int64_t rank = 0; rank < pp; ++rank) {
      int64_t held = 0, peak = 0, total = 0;
      for (int64_t stage : rank_to_stages(program.placement, shape, rank)) total += blocks[static_cast<size_t>(stage)];
      for (const auto& action : program.compute[static_cast<size_t>(rank)]) {
        const int64_t stage_blocks_held = blocks[static_cast<size_t>(action.stage)];
        if (action.type == ActionType::forward) peak = std::max(peak, held += stage_blocks_held);
        if (action.type == ActionType::full_backward || action.type == ActionType::backward_input) {
          held -= stage_blocks_held;
        }
      }
      facts.blocks.push_back(total);
      facts.peak_block_microbatches.push_back(peak);
      facts.holds_first.push_back(stage_to_rank(program.placement, shape, 0) == rank);
      facts.holds_last.push_back(stage_to_rank(program.placement, shape, shape.stages - 1) == rank);
    }
    return facts;
  } catch (const Error& error) {
    why = error.what();
    return std::nullopt;
  }
}

MemoryEstimate layout_memory(const ModelShape& model, const Layout& layout, int64_t seq_len,
                             const PipelineFacts& pipeline, const DeviceSpec& device) {
  const MeshShape& mesh = layout.mesh;
  const ParamSplit split = split_params(model);
  const double tp = static_cast<double>(mesh.tp);
  const double shards = static_cast<double>(mesh.tp * mesh.dp_shard * mesh.cp);
  const double block_gathered = split.dense_per_block / tp + split.expert_per_block / expert_split(layout);
  const double tokens = tokens_per_microbatch(layout, seq_len);
  const ActivationElements elements = activation_elements(model, layout, seq_len);
  const double saved_per_block = kBf16 * saved_elements(elements, layout.ac) * tokens;
  const double working = kBf16 * elements.plain * tokens;

  MemoryEstimate worst;
  for (size_t rank = 0; rank < pipeline.blocks.size(); ++rank) {
    const double edges = edge_params(split, pipeline, rank);
    const double rank_blocks = static_cast<double>(pipeline.blocks[rank]);
    MemoryEstimate memory;
    memory.pp_rank = static_cast<int64_t>(rank);
    memory.state =
        kStateBytesPerParam * (rank_blocks * (split.dense_per_block + split.expert_per_block) + edges) / shards;
    // A block in backward: its gathered bf16 weights, their bf16 gradients
    // and FSDP's fp32 reduce-scatter buffer. Without a pipeline the next
    // block's gather is in flight too; under one, every block of the rank
    // stays gathered all step and holds its gradients, summed in fp32,
    // until the step's last backward reduces them. The root unit (the
    // embedding, the head) stays gathered all step, its gradient with it.
    const double in_backward = block_gathered * (kBf16 + kFp32);
    memory.gathered_params = mesh.pp > 1 ? rank_blocks * block_gathered * (gathered_bytes(layout) + kFp32) + in_backward
                                         : 2 * block_gathered * gathered_bytes(layout) + in_backward;
    memory.gathered_params += edges / tp * (kBf16 + kBf16);
    memory.activations = saved_per_block * static_cast<double>(pipeline.peak_block_microbatches[rank]) + working;
    if (pipeline.holds_last[rank]) memory.logits = kLogitBytes * tokens * static_cast<double>(model.vocab) / tp;
    memory.overhead = device.name == "cpu" ? 0.5 * kGiB : 2 * kGiB;
    if (memory.total() > worst.total()) worst = memory;
  }
  return worst;
}

StepWork layout_work(const ModelShape& model, const Layout& layout, int64_t seq_len, int64_t global_sequences,
                     const PipelineFacts& pipeline) {
  const MeshShape& mesh = layout.mesh;
  const ParamSplit split = split_params(model);
  const double world = static_cast<double>(mesh.world()), tp = static_cast<double>(mesh.tp);
  const double d = static_cast<double>(model.hidden), seq = static_cast<double>(seq_len);
  const double job_tokens = static_cast<double>(global_sequences) * seq;

  // FLOPs per token: the output head, attention's scores and values, the
  // blocks' matmuls (of which the dense ones run in float8 under float8;
  // the experts' grouped GEMMs and the head stay in bf16).
  const double head = 6 * static_cast<double>(model.vocab) * d;
  const double attention = 12 * static_cast<double>(model.layers * model.q_dim) * seq;
  const double linear = std::max(0.0, model.flops_per_token - head - attention);
  const double dense_linear = std::min(linear, 6 * static_cast<double>(model.layers) * split.dense_per_block);
  const Recompute recompute = recompute_of(layout.ac);

  StepWork work;
  work.tokens = job_tokens;
  work.model_flops = model.flops_per_token * job_tokens / world;
  work.flops =
      (model.flops_per_token + recompute.linear * linear + recompute.attention * attention) * job_tokens / world;
  work.attention_flops = attention * (1 + recompute.attention) * job_tokens / world;
  if (layout.float8) work.float8_flops = dense_linear * (1 + recompute.linear) * job_tokens / world;

  // The busiest pp rank's share (ranks differ by a block or two).
  const double rank_blocks = static_cast<double>(*std::max_element(pipeline.blocks.begin(), pipeline.blocks.end()));
  const double edges = mesh.pp > 1 ? split.head : split.embedding + split.head;
  // The optimizer reads parameter, gradient and moments, writes three back,
  // and clipping reads the gradient again: 32 bytes per local parameter.
  const double local_params = (rank_blocks * (split.dense_per_block + split.expert_per_block) + edges) /
                              static_cast<double>(mesh.tp * mesh.dp_shard * mesh.cp);
  work.hbm_bytes = 32 * local_params;

  const double passes = static_cast<double>(mesh.pp > 1 ? layout.microbatches : layout.accumulation);
  const double units = rank_blocks + 1;
  work.overlap_units = static_cast<int64_t>(units);
  const double tokens = tokens_per_microbatch(layout, seq_len);
  auto add = [&](const std::string& dim, const std::string& op, double bytes, double calls) {
    work.traffic.push_back({dim, op, bytes, static_cast<int64_t>(calls)});
  };

  // FSDP: gather before forward and (resharded after it) again before
  // backward, reduce-scatter in fp32 after every microbatch's backward;
  // under a pipeline, one gather and one reduce-scatter a step. HSDP
  // all-reduces the reduced shard.
  const std::string dense_dim = mesh.cp > 1 ? "dp_shard_cp" : "dp_shard";
  const std::string expert_dim = mesh.ep > 1 ? "efsdp" : dense_dim;
  const double gathers = mesh.pp > 1 ? 1 : 2;
  const double fsdp_passes = mesh.pp > 1 ? 1 : passes;
  const double dense = rank_blocks * split.dense_per_block / tp + edges / tp;
  const double experts = rank_blocks * split.expert_per_block / expert_split(layout);
  for (const auto& [dim, params] : {std::make_pair(dense_dim, dense), std::make_pair(expert_dim, experts)}) {
    if (params <= 0) continue;
    add(dim, "all_gather", fsdp_passes * gathers * params * gathered_bytes(layout), fsdp_passes * gathers * units);
    add(dim, "reduce_scatter", fsdp_passes * params * kFp32, fsdp_passes * units);
  }
  add("dp_replicate", "all_reduce",
      fsdp_passes * (dense + experts) / static_cast<double>(mesh.dp_shard * mesh.cp) * kFp32, fsdp_passes * units);

  const double activation = tokens * d * kBf16;  // one microbatch's [tokens, dim] on a tp rank, whole
  const double layer_passes = passes * rank_blocks;
  if (mesh.tp > 1) {
    // Per block: sequence parallel gathers before and reduce-scatters after
    // attention and the MLP, forward and backward (plain TP all-reduces
    // twice each way); a recomputed forward repeats its half.
    if (sequence_parallel(layout)) {
      add("tp", "all_gather", layer_passes * (8 + 4 * recompute.tp_forwards) * activation,
          layer_passes * (8 + 4 * recompute.tp_forwards));
    } else {
      add("tp", "all_reduce", layer_passes * (4 + 2 * recompute.tp_forwards) * activation,
          layer_passes * (4 + 2 * recompute.tp_forwards));
    }
  }
  if (mesh.cp > 1) {
    // Ring attention passes this rank's K and V around the cp - 1 others in
    // forward, and K, V and their gradients in backward.
    const double kv_block = 2 * tokens * static_cast<double>(model.kv_dim) / tp * kBf16;
    const double rounds = 3 + (recompute.attention > 0 ? recompute.tp_forwards : 0);
    add("cp", "send", layer_passes * rounds * static_cast<double>(mesh.cp - 1) * kv_block,
        layer_passes * rounds * static_cast<double>(mesh.cp - 1));
    // Each of the cp steps merges its partial output into the running one
    // in fp32 (read both, write one; the backward's partial gradients
    // likewise): memory-bound work plain attention does not have.
    work.hbm_bytes += layer_passes * rounds * static_cast<double>(mesh.cp) * tokens *
                      static_cast<double>(model.q_dim) / tp * 3 * kFp32;
  }
  if (mesh.ep > 1) {
    // Dispatch and combine, forward and backward, of each token's k copies.
    const double routed = tokens / tp * static_cast<double>(model.experts_per_token) * d * kBf16;
    const double moe_passes =
        layer_passes * static_cast<double>(model.moe_layers) / static_cast<double>(model.layers);
    const double calls = moe_passes * (4 + 2 * recompute.tp_forwards);
    add("ep", "all_to_all", calls * routed, calls);
  }
  if (mesh.pp > 1) {
    // Each stage sends its output forward and its input's gradient back.
    const double sends = passes * 2 * static_cast<double>(pipeline.stages_per_rank);
    add("pp", "send", sends * activation, sends);
  }
  work.bubble_fraction = pipeline.bubble_fraction;
  return work;
}

std::vector<std::string> cost_model_assumptions() {
  return {
      "memory: fp32 parameters, fp32 gradients and AdamW's two fp32 moments (16 bytes a parameter), sharded over "
      "dp_shard x cp x tp (experts over efsdp x ep), replicated over dp_replicate; compute in bf16 "
      "(training.mixed_precision_param: bfloat16, reduce in float32), as TorchTitan's default",
      "memory: FSDP holds the block in backward gathered in bf16 with its bf16 gradient and fp32 reduce-scatter "
      "buffer, plus the next block's gather (none under a pipeline, where every block of the rank stays gathered "
      "from its forward to its backward); the embedding and the output head stay gathered all step",
      "memory: activations per block from the tensors autograd keeps (two RMSNorms, q/k/v and attention's output "
      "with flash attention's log-sum-exp, SwiGLU's gate/up/product; for MoE the routed copies and experts), divided "
      "by tp (norms only with sequence parallelism, which Titan turns off under a pipeline) and cp; full AC keeps a "
      "block's input, selective 2 every other block whole, selective op every other linear's output plus each "
      "attention's softmax weights (heads x seq per token: Titan's per-op mode replays attention from them); one "
      "block's activations more for the backward in progress",
      "memory: a pipeline rank holds the activations its schedule's action lists keep in flight (forwards whose "
      "backward has not run), each stage's blocks by the pipeline plugin's split rule",
      "memory: the loss's logits on the last stage at 14 bytes each (bf16 logits, fp32 copy and log-softmax, fp32 "
      "gradient), split over tp by loss parallel; 2 GiB a GPU for the CUDA context and NCCL / cuBLAS workspaces",
      "work: FLOPs per token from the model (6 x active parameters + attention), plus the recompute (full: one "
      "more forward of the blocks; selective 2: half of one; selective op: half the linears' forward); float8 "
      "runs the dense block linears (not the output head, the experts or attention)",
      "work: context parallelism adds, per block and ring step, an fp32 merge of the partial attention output "
      "(forward) and gradients (backward) at memory bandwidth, beside its K/V transfers",
      "work: FSDP gathers each block before forward and again before backward and reduce-scatters it in fp32 "
      "after every microbatch's backward (under a pipeline: one gather and one reduce-scatter a step, the "
      "gradients held in fp32 until then); TP moves each block's "
      "activation 8 times a microbatch (sequence parallel's gathers and reduce-scatters, or 4 all-reduces), 4 "
      "more with recompute",
      "pipeline: bubble and in-flight microbatches from the schedule's compiled action lists, with the whole "
      "backward in I (W = 0): Titan's FSDP and activation checkpointing keep the weight gradients in it",
  };
}

}  // namespace titan
