// Which modules each pipeline stage holds: TorchTitan's rule
// (generate_llm_fqn_per_model_part) over a model's top-level modules and
// blocks, or a user's own list checked against the model. Pure functions of
// the model's layout, so every rank computes the same split on its own.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace torch::nn {
class Module;
}

namespace titan::pipeline {

// A model as the split sees it, in registration order: the top-level
// modules before its "layers" container (tok_embeddings), the blocks
// ("layers.0", ...), the top-level modules after it (norm, output).
struct ModelLayout {
  std::string flavor;
  std::vector<std::string> inputs;
  std::vector<std::string> blocks;
  std::vector<std::string> outputs;
};
// Throws titan::Error when the model has no top-level "layers" container.
ModelLayout read_layout(const torch::nn::Module& model, const std::string& flavor);

struct SplitOptions {
  int64_t layers_per_stage = 0;  // 0: `default_stages` stages
  int64_t first_stage_less_layers = 1;
  int64_t last_stage_less_layers = 1;
};

// Blocks per stage: blocks + first_less + last_less layer units dealt out as
// evenly as they go, the first stages one more each for the remainder; the
// first stage gives first_less of its units to the input modules, the last
// last_less to the output modules. Empty when a stage would hold a negative
// number of blocks, or a middle stage none (stages >= 1).
std::vector<int64_t> blocks_per_stage(int64_t blocks, int64_t stages, int64_t first_less, int64_t last_less);

// The module paths of each stage by the rule above. Throws titan::Error
// naming the options, their values and what would work.
std::vector<std::vector<std::string>> split_by_rule(const ModelLayout& layout, const SplitOptions& options,
                                                    int64_t default_stages);

// `parts` as given, after checking that each path is a module of `model`,
// names a whole block or top-level module (or "layers", every block), and
// that every block and top-level module is in exactly one part, in model
// order. Throws titan::Error naming module_fqns_per_model_part.
std::vector<std::vector<std::string>> check_parts(const torch::nn::Module& model, const ModelLayout& layout,
                                                  const std::vector<std::vector<std::string>>& parts);

}  // namespace titan::pipeline
