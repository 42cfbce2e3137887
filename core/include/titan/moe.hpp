// Mixture-of-Experts as a core layer (TorchTitan's MoE semantics): a token-
// choice top-k router with auxiliary-loss-free load balancing, routed
// experts held as grouped weights, an optional dense shared expert. Each
// part is a named child the model looks up at every call, so plugins swap
// them by path: "layers.3.moe.router.gate" (a Linear), "...moe.experts",
// "...moe.dispatcher" (where expert parallelism puts its all-to-all) and
// "...moe.shared_experts" (a FeedForward).
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "titan/layers.hpp"
#include "titan/model.hpp"

namespace titan {

class DeviceMesh;

enum class RouterScore { softmax, sigmoid };
// How the routed experts multiply: `loop` one matmul per expert (any
// device); `grouped_mm` LibTorch's grouped GEMM (a CUTLASS kernel on CUDA
// sm90+ for bf16; LibTorch's own loop elsewhere; dim and the experts' width
// must make 16-byte rows); `automatic` the grouped GEMM on CUDA when the
// sizes allow it, the loop otherwise.
enum class ExpertsBackend { automatic, loop, grouped_mm };

struct MoEOptions {
  int64_t num_experts = 8;
  int64_t top_k = 1;
  int64_t hidden_dim = 0;             // each expert's FFN width (F)
  int64_t num_shared_experts = 0;     // shared expert width = hidden_dim * this; 0: none
  RouterScore score_func = RouterScore::sigmoid;
  bool route_norm = false;            // gate values of a token divided by their sum
  double route_scale = 1.0;
  int64_t num_expert_groups = 0;      // > 0: group-limited routing over this many groups
  int64_t num_limited_groups = 0;     // groups a token may use when num_expert_groups > 0
  double load_balance_coeff = 1e-3;   // <= 0 disables the expert bias (TorchTitan's None)
  bool force_load_balance = false;    // debug: round-robin routing, exactly balanced
  // debug: non-empty: tokens go round-robin over only these experts (the
  // routing extremes: every token to one expert, experts or ranks idle)
  std::vector<int64_t> forced_experts;
  bool score_before_experts = true;   // gate values scale the experts' input (else their output)
  bool router_bias = false;           // the gate linear has a bias (GPT-OSS)
  ExpertsBackend backend = ExpertsBackend::automatic;
  int64_t token_group_alignment = 0;  // rows each expert's group is padded to; 0: 16 on CUDA, 1 on CPU
};

// What is wrong with the options for a model of width `dim`, as {key,
// message} for ConfigNode::fail; both empty when nothing.
std::pair<std::string, std::string> find_moe_problem(const MoEOptions& options, int64_t dim);

// Where each token goes: gate values [tokens, top_k] (fp32) and expert ids
// [tokens, top_k] (int64).
struct Routing {
  at::Tensor top_scores;
  at::Tensor selected;
};

// Scores in fp32 (gate linear, softmax or sigmoid); top-k on scores +
// expert_bias, optionally within the best groups; gate values from the
// unbiased scores. Buffers: tokens_per_expert (fp32, counted in every
// forward that is not a recompute inside a backward) and expert_bias (when
// load_balance_coeff > 0).
class Router : public torch::nn::Module {
 public:
  Router(int64_t dim, const MoEOptions& options, const at::TensorOptions& tensor_options);
  Routing forward(const at::Tensor& x);  // x [tokens, dim]
  // Zeroes both buffers (after materialization: they are not parameters).
  void reset_buffers();
  // expert_bias += coeff * sign(mean - counts), centred, from `counts` [E]
  // summed over every data-parallel rank; then tokens_per_expert = 0.
  void update_expert_bias(const at::Tensor& counts);
  const MoEOptions& options() const { return options_; }
  at::Tensor tokens_per_expert;
  at::Tensor expert_bias;  // undefined when load balancing is off

 private:
  MoEOptions options_;
};

// One expert's product x [rows, in] @ weight [out, in]^T: a seam a
// precision plugin fills (float8 experts); unset, the matmul.
using ExpertMatmul = std::function<at::Tensor(const at::Tensor& x, const at::Tensor& weight)>;

// Every expert's product at once: x [rows, in] in expert order @ each
// expert's weights [E, out, in]^T. `group_ends` (int32, on x's device) and
// `group_rows` (the host's copy) say where each expert's rows end and how
// many it has, each a multiple of the grouped GEMM's alignment. A seam a
// precision plugin fills (float8 experts: `_scaled_grouped_mm`); unset,
// at::_grouped_mm.
using ExpertGroupedMatmul = std::function<at::Tensor(const at::Tensor& x, const at::Tensor& weights,
                                                     const at::Tensor& group_ends,
                                                     const std::vector<int64_t>& group_rows)>;

// The routed experts as the MoE layer calls them (`experts`): each expert's
// rows in, together in expert order, and its output rows out. Every
// parameter is [E, ...], E the experts this rank holds: expert parallelism
// shards dim 0 of each. Core's GroupedExperts is TorchTitan's SwiGLU; a model
// may bring its own (GPT-OSS's clamped SwiGLU with biases).
class RoutedExperts : public torch::nn::Module {
 public:
  ~RoutedExperts() override;
  // tokens [rows, D]; tokens_per_expert sums to rows.
  virtual at::Tensor forward(const at::Tensor& tokens, const std::vector<int64_t>& tokens_per_expert) = 0;
  // Whether forward_on_device_counts runs these tokens: the experts then take
  // their rows' counts on the tokens' device and read nothing on the host
  // (on a GPU a read waits for the device). Default: no, forward() does.
  virtual bool runs_on_device_counts(const at::Tensor& tokens) const;
  // forward() from `counts` (int64 [E] on the tokens' device, summing to
  // rows). Default: throws (runs_on_device_counts said no).
  virtual at::Tensor forward_on_device_counts(const at::Tensor& tokens, const at::Tensor& counts);
  // For tensor parallelism's split of each expert's width: every
  // parameter's dim along the hidden width F, or -1 for one that is added
  // after the down projection (a bias there), which a width split would
  // add once per rank: such experts are refused and need expert parallelism.
  virtual std::map<std::string, int64_t> hidden_width_dims() const = 0;
};

// The routed experts' SwiGLU on grouped weights w1 [E, F, D], w2 [E, D, F],
// w3 [E, F, D].
class GroupedExperts : public RoutedExperts {
 public:
  GroupedExperts(int64_t num_experts, int64_t dim, int64_t hidden_dim, const MoEOptions& options,
                 const at::TensorOptions& tensor_options);
  // With `matmul` set and no `grouped_matmul`, always the loop over experts
  // (at::_grouped_mm multiplies in its own precision).
  at::Tensor forward(const at::Tensor& tokens, const std::vector<int64_t>& tokens_per_expert) override;
  // Where the grouped GEMM is at::_grouped_mm itself (no product seam set):
  // each group's padding is laid out on the device.
  bool runs_on_device_counts(const at::Tensor& tokens) const override;
  at::Tensor forward_on_device_counts(const at::Tensor& tokens, const at::Tensor& counts) override;
  std::map<std::string, int64_t> hidden_width_dims() const override { return {{"w1", 1}, {"w3", 1}, {"w2", 2}}; }
  at::Tensor w1, w2, w3;
  ExpertMatmul matmul;                // the loop's product
  ExpertGroupedMatmul grouped_matmul;  // the grouped GEMM's, where the backend is grouped_mm

 private:
  bool grouped(const at::Tensor& tokens) const;  // the grouped GEMM, not the loop
  int64_t alignment(const at::Tensor& tokens) const;

  ExpertsBackend backend_;
  int64_t alignment_;
};

// The two ways GroupedExperts multiplies, for tests and benchmarks.
at::Tensor run_experts_loop(const at::Tensor& w1, const at::Tensor& w2, const at::Tensor& w3,
                            const at::Tensor& tokens, const std::vector<int64_t>& tokens_per_expert,
                            const ExpertMatmul& matmul = {});
// Pads each expert's group with zero rows to a multiple of `alignment`
// (what the CUDA kernel needs), runs at::_grouped_mm (or `product`), drops
// the padding.
at::Tensor run_experts_grouped_mm(const at::Tensor& w1, const at::Tensor& w2, const at::Tensor& w3,
                                  const at::Tensor& tokens, const std::vector<int64_t>& tokens_per_expert,
                                  int64_t alignment, const ExpertGroupedMatmul& product = {});
// The same from `counts` (int64 [E]) on the tokens' device, reading nothing
// on the host: the padded layout is computed there, in a buffer of rows +
// E * (alignment - 1) rows whose tail past the last group the GEMM skips.
// Bit for bit what run_experts_grouped_mm gives.
at::Tensor run_experts_grouped_mm_on_device(const at::Tensor& w1, const at::Tensor& w2, const at::Tensor& w3,
                                            const at::Tensor& tokens, const at::Tensor& counts, int64_t alignment);

// How many of the selected slots (expert ids, any shape) go to each of
// `num_experts` experts: int64 [num_experts] on their device. Nothing is read
// on the host (at::bincount reads the ids' smallest and largest to the host
// on CUDA, each a wait for the device).
at::Tensor count_per_expert(const at::Tensor& selected, int64_t num_experts);

// Tokens grouped by expert for the experts, and what combine needs.
struct DispatchedTokens {
  at::Tensor tokens;                       // [rows, D], expert 0's rows first
  std::vector<int64_t> tokens_per_expert;  // rows per (local) expert
  at::Tensor order;                        // [rows]: each row's (token * top_k + slot)
  at::Tensor counts;                       // rows per expert on the tokens' device (int64; the local dispatcher's)
  // What a replacing dispatcher keeps for its combine (expert parallelism:
  // the all-to-all splits); the layer only carries it.
  std::shared_ptr<const void> exchange;
};

// The token dispatch seam: local sorting here; expert parallelism replaces
// it (by path "...moe.dispatcher") with an all-to-all to the experts' ranks.
class TokenDispatcher : public torch::nn::Module {
 public:
  ~TokenDispatcher() override;
  // x [N, D]; selected [N, K]; row_scale [N * K] fp32 or undefined: each
  // (token, slot) row multiplied by it before leaving (gate before experts).
  virtual DispatchedTokens dispatch(const at::Tensor& x, const at::Tensor& selected, int64_t num_experts,
                                    const at::Tensor& row_scale);
  // dispatch() that leaves the counts on the device (`counts`;
  // tokens_per_expert empty), for experts that run on them: the MoE layer
  // calls it instead when this dispatcher was not replaced.
  DispatchedTokens dispatch_on_device(const at::Tensor& x, const at::Tensor& selected, int64_t num_experts,
                                      const at::Tensor& row_scale);
  // The experts' rows back in (token, slot) order: [N, K, D]. Deterministic:
  // every row has one place, nothing is added concurrently.
  virtual at::Tensor combine(const at::Tensor& expert_output, const DispatchedTokens& dispatched, int64_t tokens,
                             int64_t top_k);

 protected:
  // dispatch() without the counts: the rows sorted by expert (stably) and
  // scaled, `tokens_per_expert` left empty, nothing read on the host (a
  // replacing dispatcher reads its counts together with its peers').
  static DispatchedTokens sort_by_expert(const at::Tensor& x, const at::Tensor& selected, const at::Tensor& row_scale);
};

// router -> dispatcher -> experts -> combine (+ shared experts).
class MoE : public Layer {
 public:
  // `experts` null: core's GroupedExperts of options.hidden_dim.
  MoE(int64_t dim, const MoEOptions& options, const at::TensorOptions& tensor_options,
      std::shared_ptr<RoutedExperts> experts = nullptr);
  at::Tensor forward(const at::Tensor& x) override;  // [batch, seq, D] or [tokens, D]
  // The layer's output for the token rows `rows` (int64 indices into the
  // flattened [tokens, D] input) only: [rows, D]. The router still scores
  // every token, so its counts and expert bias are those of the whole
  // input; the experts and the shared expert see only these rows (tensor
  // parallelism splits a MoE layer's tokens over its ranks this way).
  at::Tensor forward_rows(const at::Tensor& x, const at::Tensor& rows);
  const MoEOptions& options() const { return options_; }

 private:
  at::Tensor run(const at::Tensor& x, const at::Tensor& rows);
  MoEOptions options_;
};

// The change load balancing makes to expert_bias for `counts` [E]:
// coeff * sign(mean - counts), minus its mean.
at::Tensor expert_bias_delta(const at::Tensor& counts, double coeff);

// Every MoE layer in a model with its module path, in module order; a MoE
// layer another plugin wrapped (LayerWrapper) is found inside its wrapper.
std::vector<std::pair<std::string, std::shared_ptr<MoE>>> find_moe_layers(const torch::nn::Module& model);

// Every Router in a model with its module path, in module order.
std::vector<std::pair<std::string, std::shared_ptr<Router>>> find_routers(const torch::nn::Module& model);
// Zeroes every router's buffers after materialization (they hold garbage
// then); an Error naming `model_name` for a router still on meta.
void reset_router_buffers(const torch::nn::Module& model, const std::string& model_name);

// One router's load over a step: max / mean of tokens per expert (1 is
// perfectly balanced) and the L2 norm of its expert bias after the update.
struct RouterLoad {
  std::string path;
  double imbalance = 0;
  double expert_bias_norm = 0;
};

// Sums [routers, experts] counts over the ranks that saw different tokens
// (dp and cp), in place.
using CountReduction = std::function<void(at::Tensor& counts)>;
// The trainer's: a sum over dp_cp on the counts' device (nothing without a
// mesh or with one dp_cp rank), then over the replica groups of a
// fault-tolerant job when the context has them.
CountReduction sum_over_data_parallel(const StepHookContext& context);

// The step's load balancing, for the trainer to call after the last
// backward and before the optimizer (TorchTitan's optimizer pre-step hook):
// every router's counts, summed over ranks by `reduce` (may be empty on one
// process), update its expert bias and are reset. Returns each router's load.
// `read_loads`: false leaves the loads out (the trainer's steps that do not
// log: computing them reads each router's counts on the host).
std::vector<RouterLoad> balance_experts(const torch::nn::Module& model, const CountReduction& reduce,
                                        bool read_loads = true);
// The loads as metrics: "moe/<path>/imbalance", "moe/<path>/expert_bias_norm".
std::map<std::string, double> moe_metrics(const std::vector<RouterLoad>& loads);

// For a model with routers (none: nothing added), in its constructor: the
// step hook that balances its experts before the optimizer (balance_experts
// over dp and cp, metrics on log steps) and keeps the routers' expert
// biases as training state ("<router path>.expert_bias").
void add_moe_step_hook(CausalLM& model);

}  // namespace titan
