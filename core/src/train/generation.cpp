// Decoding a trained model token by token (`titan generate`).
#include "titan/generation.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>

#include <chrono>
#include <limits>
#include <optional>

#include "initial_load.hpp"
#include "run_device.hpp"
#include "titan/decoder.hpp"
#include "titan/error.hpp"
#include "titan/logging.hpp"

namespace titan {

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Tokens [1, n] on `device` from host ids.
at::Tensor token_row(const std::vector<int64_t>& ids, const c10::Device& device) {
  return at::tensor(ids, at::kLong).view({1, -1}).to(device);
}

}  // namespace

std::string sampling_problem(const SamplingOptions& options) {
  if (!(options.temperature >= 0)) return "--temperature must be >= 0 (0: greedy), got " + std::to_string(options.temperature);
  if (options.top_k < 0) return "--top-k must be >= 0 (0: no limit), got " + std::to_string(options.top_k);
  if (!(options.top_p > 0 && options.top_p <= 1)) {
    return "--top-p must be in (0, 1] (1: no limit), got " + std::to_string(options.top_p);
  }
  return {};
}

int64_t next_token(const at::Tensor& logits, const SamplingOptions& options, at::Generator& generator) {
  if (options.temperature == 0) return logits.argmax().item<int64_t>();
  // transformers' order: temperature, then top-k, then top-p.
  at::Tensor scores = logits.to(at::kCPU, at::kFloat) / options.temperature;
  const double hidden = -std::numeric_limits<double>::infinity();
  if (options.top_k > 0 && options.top_k < scores.size(0)) {
    at::Tensor kth = std::get<0>(scores.topk(options.top_k)).select(0, options.top_k - 1);
    scores = scores.masked_fill(scores < kth, hidden);
  }
  if (options.top_p < 1) {
    auto [sorted, order] = scores.sort(/*dim=*/0, /*descending=*/true);
    at::Tensor probs = sorted.softmax(0);
    // A token is dropped when the likelier ones already reach top_p; the
    // likeliest always stays.
    at::Tensor dropped = (probs.cumsum(0) - probs) >= options.top_p;
    scores = scores.scatter(0, order, sorted.masked_fill(dropped, hidden));
  }
  return at::multinomial(scores.softmax(0), 1, /*replacement=*/false, generator).item<int64_t>();
}

double Generation::tokens_per_sec() const {
  return tokens.size() > 1 && decode_seconds > 0 ? static_cast<double>(tokens.size() - 1) / decode_seconds : 0;
}

Generation generate(CausalLM& model, const std::vector<int64_t>& prompt, const GenerationOptions& options) {
  if (prompt.empty()) throw Error("generate: the prompt has no tokens");
  if (options.max_new_tokens < 1) {
    throw Error("--max-new-tokens must be >= 1, got " + std::to_string(options.max_new_tokens));
  }
  if (std::string problem = sampling_problem(options.sampling); !problem.empty()) throw Error(problem);
  at::NoGradGuard no_grad;
  model.eval();
  const c10::Device device = model.parameters().at(0).device();
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(options.seed);
  auto* decoder = options.use_cache ? dynamic_cast<Decoder*>(&model) : nullptr;
  // The last token drawn is never run through the model.
  std::optional<KvCache> cache;
  if (decoder) cache.emplace(static_cast<int64_t>(prompt.size()) + options.max_new_tokens - 1);

  Generation result;
  result.cached = decoder != nullptr;
  std::vector<int64_t> sequence = prompt;
  auto start = std::chrono::steady_clock::now();
  at::Tensor input = token_row(prompt, device);
  while (true) {
    at::Tensor logits = decoder ? decoder->forward(input, *cache) : model.forward(input);
    const int64_t token = next_token(logits[0][-1], options.sampling, generator);
    result.tokens.push_back(token);
    sequence.push_back(token);
    if (result.tokens.size() == 1) {
      result.prompt_seconds = seconds_since(start);
      start = std::chrono::steady_clock::now();
    }
    result.stopped = options.stop_id && token == *options.stop_id;
    if (result.stopped || static_cast<int64_t>(result.tokens.size()) == options.max_new_tokens) break;
    input = decoder ? token_row({token}, device) : token_row(sequence, device);
  }
  if (result.tokens.size() > 1) result.decode_seconds = seconds_since(start);
  return result;
}

std::shared_ptr<CausalLM> load_model_for_inference(const RunSpec& spec, const std::string& folder) {
  set_threads_and_seed(spec.core.training);
  std::shared_ptr<CausalLM> model = spec.model->build(training_device(spec.core.training));
  model->init_buffers();  // the loaded ones are overwritten next
  load_weights(*spec.checkpointer, *spec.model, *model, folder, "checkpoint", /*with_saved_buffers=*/true);
  return model;
}

}  // namespace titan
