// Byte-level BPE trainer: counts pre-tokenized words, then repeatedly merges
// the most frequent adjacent pair, updating pair counts only in the words that
// hold the merged pair. Writes a tokenizer.json shaped like Llama 3's.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "byte_level.hpp"
#include "pretokenize.hpp"
#include "titan/error.hpp"
#include "titan/tokenizer.hpp"

namespace titan {

namespace {

using tokenizer::Pretokenizer;

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

struct Word {
  std::vector<int32_t> symbols;
  int64_t count;
};

// Most frequent first; ties go to the smaller (left, right) id pair, so the
// result depends only on the corpus, never on hash-table order.
struct Candidate {
  int64_t count;
  int32_t left, right;
  bool operator<(const Candidate& o) const {
    if (count != o.count) return count < o.count;
    if (left != o.left) return left > o.left;
    return right > o.right;
  }
};

class Trainer {
 public:
  Trainer(std::vector<Word> words, int64_t merges_wanted) : words_(std::move(words)), merges_wanted_(merges_wanted) {
    for (int b = 0; b < 256; ++b) token_bytes_.emplace_back(1, static_cast<char>(b));
    for (size_t w = 0; w < words_.size(); ++w) {
      const auto& s = words_[w].symbols;
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        uint64_t key = pair_key(s[i], s[i + 1]);
        pair_count_[key] += words_[w].count;
        auto& where = words_with_[key];
        if (where.empty() || where.back() != static_cast<int32_t>(w)) where.push_back(static_cast<int32_t>(w));
      }
    }
    for (const auto& [key, count] : pair_count_) {
      heap_.push({count, static_cast<int32_t>(key >> 32), static_cast<int32_t>(key & 0xFFFFFFFFu)});
    }
  }

  void run() {
    while (static_cast<int64_t>(merges_.size()) < merges_wanted_ && !heap_.empty()) {
      Candidate top = heap_.top();
      heap_.pop();
      uint64_t key = pair_key(top.left, top.right);
      auto it = pair_count_.find(key);
      int64_t current = it == pair_count_.end() ? 0 : it->second;
      if (current != top.count) {  // stale: counts only fall after an entry is pushed
        if (current > 0) heap_.push({current, top.left, top.right});
        continue;
      }
      if (current <= 0) break;
      merge(top.left, top.right);
    }
  }

  const std::vector<std::string>& token_bytes() const { return token_bytes_; }
  const std::vector<std::pair<int32_t, int32_t>>& merges() const { return merges_; }

 private:
  void merge(int32_t left, int32_t right) {
    const int32_t merged = static_cast<int32_t>(token_bytes_.size());
    token_bytes_.push_back(token_bytes_[static_cast<size_t>(left)] + token_bytes_[static_cast<size_t>(right)]);
    merges_.emplace_back(left, right);
    const uint64_t merged_key = pair_key(left, right);
    std::vector<int32_t> where = std::move(words_with_[merged_key]);
    words_with_.erase(merged_key);
    std::sort(where.begin(), where.end());
    where.erase(std::unique(where.begin(), where.end()), where.end());
    std::unordered_set<uint64_t> new_pairs;
    std::vector<int32_t> rewritten;
    for (int32_t w : where) {
      Word& word = words_[static_cast<size_t>(w)];
      std::vector<int32_t>& s = word.symbols;
      rewritten.clear();
      bool found = false;
      for (size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == left && s[i + 1] == right) {
          rewritten.push_back(merged);
          ++i;
          found = true;
        } else {
          rewritten.push_back(s[i]);
        }
      }
      if (!found) continue;  // an old entry: an earlier merge removed the pair here
      for (size_t i = 0; i + 1 < s.size(); ++i) pair_count_[pair_key(s[i], s[i + 1])] -= word.count;
      for (size_t i = 0; i + 1 < rewritten.size(); ++i) {
        uint64_t key = pair_key(rewritten[i], rewritten[i + 1]);
        pair_count_[key] += word.count;
        if (rewritten[i] == merged || rewritten[i + 1] == merged) {
          new_pairs.insert(key);
          auto& list = words_with_[key];
          if (list.empty() || list.back() != w) list.push_back(w);
        }
      }
      s.swap(rewritten);
    }
    pair_count_.erase(merged_key);
    // Only pairs holding the new token can have grown; the rest are
    // re-queued lazily when their stale entry surfaces.
    for (uint64_t key : new_pairs) {
      auto it = pair_count_.find(key);
      if (it != pair_count_.end() && it->second > 0) {
        heap_.push({it->second, static_cast<int32_t>(key >> 32), static_cast<int32_t>(key & 0xFFFFFFFFu)});
      }
    }
  }

  std::vector<Word> words_;
  int64_t merges_wanted_;
  std::vector<std::string> token_bytes_;
  std::vector<std::pair<int32_t, int32_t>> merges_;
  std::unordered_map<uint64_t, int64_t> pair_count_;
  std::unordered_map<uint64_t, std::vector<int32_t>> words_with_;
  std::priority_queue<Candidate> heap_;
};

std::vector<Word> count_words(const std::vector<std::string>& documents, int64_t max_bytes) {
  Pretokenizer pretokenizer(tokenizer::kLlama3Pattern);
  std::unordered_map<std::string_view, int64_t> counts;
  std::vector<std::string_view> pieces;
  int64_t budget = max_bytes;
  for (const std::string& document : documents) {
    if (budget <= 0) break;
    std::string_view text(document);
    if (static_cast<int64_t>(text.size()) > budget) text = text.substr(0, static_cast<size_t>(budget));
    budget -= static_cast<int64_t>(text.size());
    pieces.clear();
    pretokenizer.split(text, pieces);
    for (std::string_view piece : pieces) ++counts[piece];
  }
  std::vector<std::pair<std::string_view, int64_t>> sorted(counts.begin(), counts.end());
  std::sort(sorted.begin(), sorted.end());
  std::vector<Word> words;
  words.reserve(sorted.size());
  for (const auto& [piece, count] : sorted) {
    Word word{{}, count};
    for (char c : piece) word.symbols.push_back(static_cast<unsigned char>(c));
    words.push_back(std::move(word));
  }
  return words;
}

nlohmann::ordered_json added_token(int32_t id, const std::string& content) {
  return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", true}};
}

}  // namespace

void train_bpe_tokenizer(const std::vector<std::string>& documents, const BpeTrainingOptions& options,
                         const std::string& out_path) {
  if (options.vocab_size < 258) {
    throw Error("BPE training: vocab_size " + std::to_string(options.vocab_size) +
                " is too small; it must be at least 258 (256 bytes + BOS + EOS)");
  }
  if (options.vocab_size > (int64_t{1} << 30)) {
    throw Error("BPE training: vocab_size " + std::to_string(options.vocab_size) + " is too large");
  }
  Trainer trainer(count_words(documents, options.max_bytes), options.vocab_size - 258);
  trainer.run();

  using nlohmann::ordered_json;
  const auto& tokens = trainer.token_bytes();
  const int32_t bos = static_cast<int32_t>(tokens.size());
  ordered_json vocab = ordered_json::object();
  for (size_t id = 0; id < tokens.size(); ++id) vocab[tokenizer::bytes_to_vocab_string(tokens[id])] = id;
  ordered_json merges = ordered_json::array();
  for (const auto& [left, right] : trainer.merges()) {
    merges.push_back(tokenizer::bytes_to_vocab_string(tokens[static_cast<size_t>(left)]) + " " +
                     tokenizer::bytes_to_vocab_string(tokens[static_cast<size_t>(right)]));
  }
  ordered_json root;
  root["version"] = "1.0";
  root["truncation"] = nullptr;
  root["padding"] = nullptr;
  root["added_tokens"] = {added_token(bos, "<|begin_of_text|>"), added_token(bos + 1, "<|end_of_text|>")};
  root["normalizer"] = nullptr;
  root["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern", {{"Regex", tokenizer::kLlama3Pattern}}},
         {"behavior", "Isolated"},
         {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
  root["post_processor"] = nullptr;
  root["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  root["model"] = {{"type", "BPE"},
                   {"dropout", nullptr},
                   {"unk_token", nullptr},
                   {"continuing_subword_prefix", nullptr},
                   {"end_of_word_suffix", nullptr},
                   {"fuse_unk", false},
                   {"byte_fallback", false},
                   {"ignore_merges", false},
                   {"vocab", std::move(vocab)},
                   {"merges", std::move(merges)}};

  std::ofstream out(out_path, std::ios::binary | std::ios::trunc);
  if (!out) {
    throw Error("cannot write the trained tokenizer to '" + out_path + "': " + std::strerror(errno) +
                "; check that its folder exists and is writable");
  }
  out << root.dump(1) << '\n';
  if (!out.flush()) throw Error("writing the trained tokenizer to '" + out_path + "' failed (disk full?)");
}

}  // namespace titan
