// Text from a trained model (`titan generate`): greedy or sampled decoding,
// one token at a time through a KV cache where the model is a
// titan::Decoder, else by running the whole sequence again for each token.
#pragma once
#include <ATen/core/Generator.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "titan/model.hpp"
#include "titan/run_spec.hpp"

namespace titan {

struct SamplingOptions {
  double temperature = 0;  // 0: greedy (the likeliest token); else logits / temperature
  int64_t top_k = 0;       // > 0: draw among the k likeliest tokens only
  double top_p = 1.0;      // < 1: among the likeliest tokens whose probabilities reach top_p (nucleus)
};
// A refusal naming the option, or "" when the options are valid.
std::string sampling_problem(const SamplingOptions& options);

// The next token from one position's logits ([vocab]), drawing from
// `generator` (a CPU generator) unless greedy. Reads the choice to the host.
int64_t next_token(const at::Tensor& logits, const SamplingOptions& options, at::Generator& generator);

struct GenerationOptions {
  int64_t max_new_tokens = 64;
  SamplingOptions sampling;
  uint64_t seed = 0;
  bool use_cache = true;           // false: the whole sequence at every token (the cache's reference)
  std::optional<int64_t> stop_id;  // ends the continuation (and is its last token)
};

struct Generation {
  std::vector<int64_t> tokens;  // the continuation
  bool stopped = false;         // it ended at stop_id
  bool cached = false;          // decoded through a KV cache
  double prompt_seconds = 0;    // the prompt's forward (and the first token)
  double decode_seconds = 0;    // every later token
  // Continuation tokens per second after the first (the decoding rate).
  double tokens_per_sec() const;
};

// Continues `prompt` (token ids, not empty) with `model` in eval mode, no
// autograd, on the device of its parameters.
Generation generate(CausalLM& model, const std::vector<int64_t>& prompt, const GenerationOptions& options);

// The model of `spec` on training.device with the weights of `folder` (a
// checkpoint step folder or a Hugging Face folder; from a step folder also
// the buffers it saved, e.g. a MoE router's expert bias), whole on one
// process.
std::shared_ptr<CausalLM> load_model_for_inference(const RunSpec& spec, const std::string& folder);

}  // namespace titan
