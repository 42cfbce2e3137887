// A seeded mixture of document sources (training.datasets): each document
// comes from a source drawn by weight. The draws are a pure function of the
// seed and the draw's index, so the stream is the same on every rank and
// after every resume. A source that runs out starts over (its documents
// repeat, as weighted sampling repeats small sources); the mixture's epoch
// ends once every source has been read to its end.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "sources.hpp"
#include "titan/error.hpp"

namespace titan {

namespace {

// A uniform double in [0, 1) from (seed, index): splitmix64's finalizer.
double uniform(uint64_t seed, uint64_t index) {
  uint64_t z = seed + (index + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

class MixtureSource final : public DocumentSource {
 public:
  MixtureSource(std::vector<std::unique_ptr<DocumentSource>> sources, std::vector<double> weights, uint64_t seed,
                std::shared_ptr<const Tokenizer> tokenizer)
      : sources_(std::move(sources)), seed_(seed), tokenizer_(std::move(tokenizer)), finished_(sources_.size()) {
    const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
    double running = 0;
    for (double weight : weights) cumulative_.push_back(running += weight / total);
    cumulative_.back() = 1.0;
  }

  std::string describe() const override {
    std::string text = "a mixture of";
    for (size_t i = 0; i < sources_.size(); ++i) text += (i ? ", " : " ") + sources_[i]->describe();
    return text;
  }

  void rewind() override {
    draws_ = 0;
    std::fill(finished_.begin(), finished_.end(), false);
    for (auto& source : sources_) source->rewind();
  }

  std::optional<std::string> next_text() override { return std::nullopt; }  // ids come from next_tokens()
  bool pretokenized() const override { return true; }
  bool marks_context_only() const override {
    for (const auto& source : sources_) {
      if (source->marks_context_only()) return true;
    }
    return false;
  }

  nlohmann::json cursor() const override {
    nlohmann::json sources = nlohmann::json::array();
    for (const auto& source : sources_) sources.push_back(source->cursor());
    return {{"draws", draws_}, {"finished", finished_}, {"sources", sources}};
  }

  void seek(const nlohmann::json& cursor) override {
    const nlohmann::json& sources = cursor.at("sources");
    if (sources.size() != sources_.size()) {
      throw Error("training.datasets: the checkpoint's data cursor has " + std::to_string(sources.size()) +
                  " sources, the config " + std::to_string(sources_.size()) +
                  "; resume with the datasets the run was saved with");
    }
    draws_ = cursor.at("draws").get<uint64_t>();
    finished_ = cursor.at("finished").get<std::vector<bool>>();
    for (size_t i = 0; i < sources_.size(); ++i) sources_[i]->seek(sources[i]);
  }

  std::optional<std::vector<int32_t>> next_tokens() override {
    if (std::all_of(finished_.begin(), finished_.end(), [](bool finished) { return finished; })) return std::nullopt;
    const double u = uniform(seed_, draws_++);
    const size_t chosen = std::min(
        static_cast<size_t>(std::upper_bound(cumulative_.begin(), cumulative_.end(), u) - cumulative_.begin()),
        sources_.size() - 1);
    DocumentSource& source = *sources_[chosen];
    std::vector<int32_t> document;
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (data::append_next_document(source, *tokenizer_, document)) return document;
      finished_[chosen] = true;
      source.rewind();
    }
    throw Error(source.describe() + " contains no documents (a whole pass produced none)");
  }

 private:
  std::vector<std::unique_ptr<DocumentSource>> sources_;
  std::vector<double> cumulative_;
  uint64_t seed_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::vector<bool> finished_;  // read to its end at least once since the last rewind
  uint64_t draws_ = 0;
};

}  // namespace

std::unique_ptr<DocumentSource> open_mixture(const std::vector<DatasetEntry>& entries, uint64_t seed,
                                             std::shared_ptr<const Tokenizer> tokenizer) {
  if (entries.empty()) throw Error("training.datasets: the list is empty; give at least one {path, weight}");
  if (!tokenizer) throw Error("training.datasets: no tokenizer to read the sources with");
  std::vector<std::unique_ptr<DocumentSource>> sources;
  std::vector<double> weights;
  for (size_t i = 0; i < entries.size(); ++i) {
    const DatasetEntry& entry = entries[i];
    const std::string where = "training.datasets[" + std::to_string(i) + "] ('" + entry.path + "')";
    if (!(entry.weight > 0) || !std::isfinite(entry.weight)) {
      throw Error(where + ": weight must be a positive number, got " + std::to_string(entry.weight));
    }
    SourceOptions options;
    options.chat_template = entry.chat_template;
    options.tokenizer = tokenizer;
    options.text_field = entry.text_field;
    sources.push_back(open_dataset(entry.path, options));
    weights.push_back(entry.weight);
    // Token shards come in chunks that cut documents: drawn between other
    // sources' documents, their pieces would make documents of no one.
    if (entries.size() > 1 && sources.back()->pretokenized() && !sources.back()->marks_context_only()) {
      throw Error(where + ": pre-tokenized shards come in chunks, not documents a mixture could draw; train on "
                  "them alone (training.dataset_path), or mix the text they were made from");
    }
  }
  if (sources.size() == 1) return std::move(sources.front());
  return std::make_unique<MixtureSource>(std::move(sources), std::move(weights), seed, std::move(tokenizer));
}

}  // namespace titan
