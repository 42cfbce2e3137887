// Building a run, once, in the order the pieces depend on each other:
// device -> tokenizer and data -> parallelism (mesh, checkpointer) -> model
// (built on meta, transformed by every plugin, materialized, initialized) ->
// optimizer -> resume from a checkpoint -> metrics.
#include "training_run.hpp"

#include <unistd.h>

#include <ATen/ATen.h>

#include <algorithm>

#include "cpu_allocator.hpp"
#include "cuda_graph_choice.hpp"
#include "replica_step.hpp"
#include "initial_load.hpp"
#include "run_device.hpp"
#include "pipeline/pipeline_setup.hpp"
#include "titan/assets.hpp"
#include "titan/compat.hpp"
#include "titan/error.hpp"
#include "titan/logging.hpp"
#include "titan/model_builder.hpp"
#include "titan/microbatch_runner.hpp"
#include "titan/tokenizer.hpp"

namespace titan {

namespace {

// training.datasets, or the one dataset (dataset_path, else the built-in
// dataset) as a list of one.
std::vector<DatasetEntry> dataset_entries(const TrainingConfig& training) {
  std::vector<DatasetEntry> entries;
  for (const DatasetSourceConfig& source : training.datasets) {
    entries.push_back({resolve_asset(source.path), source.weight, source.text_field,
                       chat_template_named(source.chat_template)});
  }
  if (entries.empty()) {
    const std::string data = training.dataset_path.empty() ? training.dataset : resolve_asset(training.dataset_path);
    entries.push_back({data, 1.0, training.text_field, chat_template_named(training.chat_template)});
  }
  return entries;
}

// The mixture's draws follow the run's seed, apart from the init's stream.
uint64_t mixture_seed(const TrainingConfig& training) {
  return static_cast<uint64_t>(training.seed) ^ 0x6d69787475726573ull;
}

c10::Device choose_device(const TrainingConfig& training, const RunSeams& seams) {
  if (seams.shapes_only) return c10::Device(c10::kMeta);  // titan plan: shapes, no values
  return training_device(training);
}

int64_t accumulation_steps(const TrainingConfig& training, int64_t dp_degree) {
  if (training.global_batch_size == -1) return 1;
  const int64_t per_step = training.local_batch_size * dp_degree;
  if (training.global_batch_size % per_step != 0) {
    throw Error("training.global_batch_size (" + std::to_string(training.global_batch_size) +
                ") must be a multiple of training.local_batch_size x data-parallel degree (" +
                std::to_string(training.local_batch_size) + " x " + std::to_string(dp_degree) + ")");
  }
  return training.global_batch_size / per_step;
}

// A precision plugin decides the dtypes the parallelizers gather, compute
// and reduce in, in place of training.mixed_precision_param / _reduce.
ParallelizeContext parallelize_context(const RunSpec& spec, const DeviceMesh* mesh, const c10::Device& device) {
  const TrainingConfig& training = spec.core.training;
  auto dtype_of = [](const std::string& name) { return name == "bfloat16" ? c10::kBFloat16 : c10::kFloat; };
  ParallelizeContext context{*spec.model, device, mesh, dtype_of(training.mixed_precision_param),
                             dtype_of(training.mixed_precision_reduce)};
  if (!spec.precision) return context;
  const c10::ScalarType param = spec.precision->param_dtype(), reduce = spec.precision->reduce_dtype();
  if (!trainer_supports_dtype(param) || !trainer_supports_dtype(reduce)) {
    throw Error(std::string("the precision plugin asks for params ") + c10::toString(param) + " / reduce " +
                c10::toString(reduce) + "; the trainer supports Float and BFloat16");
  }
  if (training.mixed_precision_param != "float32" || training.mixed_precision_reduce != "float32") {
    spdlog::warn("training.mixed_precision_param / _reduce ({} / {}) are replaced by the precision plugin's",
                 training.mixed_precision_param, training.mixed_precision_reduce);
  }
  context.param_dtype = param;
  context.reduce_dtype = reduce;
  spdlog::info("precision policy: params {} / reduce {}, loss within {} of float32", c10::toString(param),
               c10::toString(reduce), spec.precision->loss_tolerance());
  return context;
}

}  // namespace

// Observers (e.g. the flight recorder) see every collective while it lives.
struct TrainingRun::ObserverScope {
  ObserverScope(RunSpec& spec, CollectiveVerifier* verifier, StepProfiler* profiler) {
    for (auto& observer : spec.comm_observers) add_comm_observer(observer.get());
    if (verifier) add_comm_observer(verifier);
    if (profiler->enabled()) add_comm_observer(profiler);
  }
  ~ObserverScope() { clear_comm_observers(); }
};

TrainingRun::TrainingRun(RunSpec& spec_, const World& world_, const RunSeams& seams_)
    : spec(spec_), world(world_), device(choose_device(spec_.core.training, seams_)),
      verifier(spec_.core.comm.verify_collectives_interval), seams(seams_),
      observer(seams_.observer ? seams_.observer : std::make_shared<RunObserver>()) {
  const CoreConfig& core = spec.core;
  const TrainingConfig& training = core.training;
  // A rank of `titan plan`'s dry run (a thread among the job's simulated
  // ranks, on meta tensors): the model, the parallelism and the step are
  // the real ones; process-wide settings, files, data and metrics are not.
  if (seams.shapes_only) {
    build_dry_run();
    return;
  }
  const std::string allocator = configure_cpu_allocator(training.cpu_allocator);
  if (world.rank == 0) spdlog::info("host allocator: {}", allocator);
  set_threads_and_seed(training);
  memory = std::make_unique<MemoryMetrics>(device);

  auto tokenizer = std::shared_ptr<const Tokenizer>(load_tokenizer(resolve_asset(core.tokenizer_path)));
  spec.model->set_vocab_size(tokenizer->vocab_size());
  const std::vector<DatasetEntry> datasets = dataset_entries(training);
  documents_ = {{tokenizer->bos_id(), tokenizer->eos_id()},
                packing_named(training.packing),
                core.block_causal,
                training.ignore_cross_document_labels,
                std::any_of(datasets.begin(), datasets.end(),
                            [](const DatasetEntry& d) { return d.chat_template != ChatTemplate::none; })};

  profiler = std::make_unique<StepProfiler>(core.profiling, core.run_folder(), world.rank, device.is_cuda());
  if (core.debug.count_host_reads) host_reads = std::make_unique<HostReadCounter>(!device.is_cpu());
  // Before the model: the CPU timeline counts its parameters too.
  memory_snapshot = std::make_unique<MemorySnapshot>(core.profiling, core.run_folder(), world.rank, device);
  observers = std::make_unique<ObserverScope>(
      spec, core.comm.verify_collectives && world.distributed() ? &verifier : nullptr, profiler.get());
  parallel = std::make_unique<ParallelSetup>(world, spec, *observer, seams.simulated_groups);
  spec.checkpointer->attach(CheckpointEnv{world.rank, world.world_size, parallel->mesh(), parallel->checkpoint_comm(),
                                          spec.root.dump()});
  int64_t data_rank = parallel->dp_rank();
  data_degree_ = parallel->dp_degree();
  if (core.fault_tolerance.enable) {
    replicas = std::make_unique<ReplicaGroups>(core.fault_tolerance,
                                               parallel->mesh() ? &parallel->mesh()->group("world") : nullptr,
                                               world.rank, world.world_size);
    data_rank = replicas->data_rank(data_rank, data_degree_);
    data_degree_ = replicas->data_degree(data_degree_);
  }
  loader = std::make_unique<TokenWindowLoader>(open_mixture(datasets, mixture_seed(training), tokenizer), tokenizer,
                                               training.seq_len, static_cast<int>(data_rank),
                                               static_cast<int>(data_degree_));
  loader->set_documents(documents_);
  accumulation_ = accumulation_steps(training, data_degree_);
  batches = std::make_unique<BatchPrefetcher>(*loader, training.local_batch_size, accumulation_);

  build_model();
  if (core.validation.enable) {
    validator = std::make_unique<Validator>(core.validation, tokenizer, documents_, *parallel, device, pipeline.get());
  }
  if (core.debug.exit_after_init) return;
  build_optimizer_and_schedule();
  if (replicas) use_replica_groups();
  state = std::make_unique<TrainStateView>(*model, *optimizer, *batches);
  if (spec.checkpointer->load(state->slots())) {
    resumed_step = state->restore(state->slots());
    spdlog::info("resumed from checkpoint at step {} (data position {})", resumed_step, batches->position());
  } else {
    loaded_initial_weights = load_initial_weights(*spec.checkpointer, *spec.model, *model);  // if set
  }

  MetricsSetup metrics_setup;
  metrics_setup.config = core.metrics;
  metrics_setup.dump_folder = core.run_folder();
  metrics_setup.rank = world.rank;
  metrics_setup.flops_per_token = spec.model->flops_per_token(training.seq_len);
  metrics_setup.peak_flops = core.metrics.peak_flops;
  if (metrics_setup.peak_flops == 0) {
    if (device.is_cuda()) {
      metrics_setup.peak_flops = gpu_peak_flops(compat::device_name(device), compute_dtype_);
    } else {
      const CpuPeak peak = cpu_peak_flops();
      metrics_setup.peak_flops = peak.flops;
      metrics_setup.peak_source = peak.source;
    }
  }
  // A replica's tokens are shared by its tp x cp x pp devices.
  metrics_setup.devices_per_replica = std::max<int64_t>(1, world.world_size / parallel->dp_degree());
  for (auto& sink : spec.metrics_sinks) metrics_setup.sinks.push_back(sink.get());
  metrics_setup.memory = memory.get();
  metrics = std::make_unique<StepMetrics>(std::move(metrics_setup));
  // Only rank 0 draws the live line, and only on a terminal (a launcher
  // pipes the ranks' output, so they print plain lines).
  metrics->set_progress(std::make_unique<Progress>(resumed_step + 1, training.steps, core.metrics.progress != "off",
                                                   world.rank == 0 && isatty(STDERR_FILENO) == 1));
}

TrainingRun::~TrainingRun() = default;

void TrainingRun::build_optimizer_and_schedule() {
  std::vector<NamedParameter> named;
  std::vector<std::string> names;
  std::vector<at::Tensor> parameters;
  for (const auto& item : model->named_parameters()) {
    if (!item.value().requires_grad()) continue;
    named.push_back({item.key(), item.value(), model->layout(item.key()), parallel->mesh()});
    parameters.push_back(item.value());
    names.push_back(item.key());
  }
  optimizer = spec.optimizer->build(named);

  default_runner_ = gradient_accumulation(
      autocast_dtype_ ? std::optional<Autocast>(Autocast{device.type(), *autocast_dtype_}) : std::nullopt);
  const TrainingConfig& training = spec.core.training;
  step_parts_.model = model.get();
  step_parts_.runner = pipeline ? pipeline.get() : spec.microbatch_runner ? spec.microbatch_runner.get() : default_runner_.get();
  step_parts_.optimizer = optimizer.get();
  step_parts_.mesh = parallel->mesh();
  step_parts_.norm_weights = norm_weights_over(parallel->mesh(), *model, names);
  step_parts_.parameters = parameters;
  step_parts_.max_norm = training.max_norm;
  CudaGraphFacts facts;
  facts.cuda = device.is_cuda();
  facts.pipeline = pipeline != nullptr;
  facts.world_size = world.world_size;
  facts.collectives = parallel->mesh() != nullptr;
  facts.varying_loss_weights = documents_.ignore_crossing_labels || documents_.context_only_tokens ||
                               documents_.packing != Packing::concat_then_split;
  for (const StepHook* hook : model->step_hooks()) {
    if (facts.host_driven.empty()) facts.host_driven = hook->host_driven;
  }
  const CudaGraphChoice graph = choose_cuda_graph(training.cuda_graph, facts);
  if (graph.capture) {
    graphed_ = std::make_unique<GraphedStep>(device, training.cuda_graph_warmup_steps, parameters,
                                             /*required=*/training.cuda_graph == TrainingConfig::CudaGraph::on);
  } else if (!graph.why_not.empty() && world.rank == 0) {
    spdlog::info("training.cuda_graph: auto, running eagerly: {}", graph.why_not);
  }
}

// The dry run's rank: the tokenizer only for its vocabulary (a large
// model's config is planned (`titan plan`) where its tokenizer file is not), no data
// (next_microbatches() makes token ids of the right shape), no checkpoint,
// no observers (the simulated groups check every collective themselves).
void TrainingRun::build_dry_run() {
  const CoreConfig& core = spec.core;
  try {
    spec.model->set_vocab_size(load_tokenizer(resolve_asset(core.tokenizer_path))->vocab_size());
  } catch (const Error&) {  // the flavor's own vocabulary, as `titan config check` does
  }
  documents_.positions = core.block_causal;  // zeros for tokens: one document a row
  parallel = std::make_unique<ParallelSetup>(world, spec, *observer, seams.simulated_groups);
  data_degree_ = parallel->dp_degree();
  accumulation_ = accumulation_steps(core.training, data_degree_);
  build_model();
  for (const StepHook* hook : model->step_hooks()) {
    if (hook->host_driven.empty()) continue;
    throw Error("the dry run cannot run " + spec.model_plugin + "'s " + hook->name + ": " + hook->host_driven +
                ", and meta tensors have no values; plan a flavor without it, or run `titan config check` for the "
                "layout");
  }
  build_optimizer_and_schedule();
}

// Through the same builder as titan-conformance (titan/model_builder.hpp);
// a pipeline cuts its parts first and each part goes through it.
void TrainingRun::build_model() {
  const ParallelizeContext context = parallelize_context(spec, parallel->mesh(), device);
  compute_dtype_ = context.param_dtype;
  if (spec.parallelizers.empty() && !spec.precision && compute_dtype_ != c10::kFloat) {
    // The parallelizers (fsdp) gather parameters in that dtype. With none
    // the weights stay float32 and the forward autocasts, as TorchTitan
    // does without FSDP; a pipeline's stages have no autocast yet.
    if (spec.pipeline || !(device.is_cpu() || device.is_cuda())) {
      spdlog::warn("training.mixed_precision_param={} takes effect through a parallelizer: a pipeline (or a dry "
                   "run) with none computes in float32. Add the fsdp plugin (dp_shard: -1)",
                   spec.core.training.mixed_precision_param);
    } else {
      autocast_dtype_ = compute_dtype_;
      spdlog::info("training.mixed_precision_param={}: float32 weights, the forward under autocast",
                   spec.core.training.mixed_precision_param);
    }
    compute_dtype_ = c10::kFloat;
  }
  CausalLM* first_stage = nullptr;
  if (spec.pipeline) {
    const PipelineRun* resolved = parallel->pipeline_run();
    if (!resolved) throw Error("pipeline: the run was not resolved (no pp mesh dim)");
    PipelineModel built = build_pipeline_model(spec, *resolved, parallel->mesh(), world.rank, device,
                                               [&](CausalLM& part) {
                                                 std::unique_lock<std::mutex> building;
                                                 if (seams.plugin_mutex) building = std::unique_lock(*seams.plugin_mutex);
                                                 apply_plugins(part, spec.parallelizers, spec.precision.get(), context);
                                               });
    model = built.model;
    first_stage = built.model->parts().front().get();
    pipeline = std::move(built.executor);
  } else {
    model = titan::build_model(*spec.model, spec.parallelizers, spec.precision.get(), context);
    first_stage = model.get();
  }
  if (spec.core.block_causal && !first_stage->supports_documents()) {
    throw Error("model.attn_mask_type: block_causal, but model " + spec.model_plugin +
                " does not read document positions (CausalLM::supports_documents; titan::Decoder's models do); set "
                "model.attn_mask_type: causal");
  }
  observer->attach(*first_stage);
  // Whether any stage has step hooks: every pp rank must agree before it
  // joins the merge of their metrics, so the stages ask each other once.
  const DeviceMesh* mesh = parallel->mesh();
  if (spec.pipeline && mesh && mesh->size("pp") > 1) {
    at::Tensor hooks_held = at::full({1}, static_cast<int64_t>(model->step_hooks().size()), at::kLong);
    mesh->group("pp").all_reduce(hooks_held, ReduceOp::max);
    hook_metrics_over_pp_ = hooks_held.item<int64_t>() > 0;
  }
  if (!seams.shapes_only) model->init_weights(static_cast<uint64_t>(spec.core.training.seed));  // meta: no values
  model->train();
  int64_t local_bytes = 0;
  for (const auto& param : model->parameters()) local_bytes += param.numel() * param.element_size();
  spdlog::info("model {} flavor {}: {:.2f}M parameters, vocab {}, on {}; this rank holds {:.1f} MiB of them, "
               "peak resident {:.1f} MiB after init",
               spec.model_plugin, spec.model->flavor(), spec.model->num_params() / 1e6, spec.model->vocab_size(),
               device.str(), local_bytes / 1048576.0, peak_resident_bytes() / 1048576.0);
}

}  // namespace titan
