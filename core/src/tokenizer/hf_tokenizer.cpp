// Hugging Face tokenizer.json, byte-level BPE only (GPT-2, Llama 3, and what
// train_bpe_tokenizer writes): vocab + merges + added tokens, GPT-2 byte table.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "bpe.hpp"
#include "byte_level.hpp"
#include "pretokenize.hpp"
#include "titan/error.hpp"
#include "tokenizer_kinds.hpp"

namespace titan::tokenizer {

namespace {

using nlohmann::json;

// Visits `node` and every object nested in it (pre_tokenizer / decoder may be a Sequence).
template <typename F>
void for_each_object(const json& node, F&& visit) {
  if (node.is_object()) {
    visit(node);
    for (const auto& item : node.items()) for_each_object(item.value(), visit);
  } else if (node.is_array()) {
    for (const auto& item : node) for_each_object(item, visit);
  }
}

class HfTokenizer final : public Tokenizer {
 public:
  HfTokenizer(const std::string& path, const std::string& content) : path_(path) {
    json root = json::parse(content, nullptr, /*allow_exceptions=*/false);
    if (root.is_discarded() || !root.is_object()) {
      throw Error(what() + " is not valid JSON (or not a JSON object); is it a complete tokenizer.json?");
    }
    const json* model = root.contains("model") ? &root["model"] : nullptr;
    if (!model || !model->is_object() || !model->contains("vocab") || !model->contains("merges")) {
      throw Error(what() +
                  " has no \"model\" with \"vocab\" and \"merges\"; only BPE tokenizer.json files are supported");
    }
    if (model->contains("type") && (*model)["type"] != "BPE") {
      throw Error(what() + ": model type " + (*model)["type"].dump() + " is not supported; only byte-level BPE is");
    }
    std::string pattern = read_pre_tokenizer(root);
    pretokenizer_ = std::make_unique<Pretokenizer>(pattern, what());
    read_vocab((*model)["vocab"]);
    read_added_tokens(root);
    read_merges((*model)["merges"]);
    int missing = model_.first_missing_byte();
    if (missing >= 0) {
      throw Error(what() + " has no token for the single byte " + std::to_string(missing) +
                  ", so some text could not be encoded; a byte-level BPE needs all 256");
    }
    if (model->value("ignore_merges", false)) model_.set_whole_piece_lookup(true);
    find_bos_eos();
  }

  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<std::string_view> pieces;
    pretokenizer_->split(text, pieces);
    std::vector<int32_t> ids;
    ids.reserve(text.size() / 3 + 1);
    for (std::string_view piece : pieces) model_.encode_piece(piece, ids);
    return ids;
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string text;
    for (int32_t id : ids) {
      auto added = added_.find(id);
      if (added != added_.end()) {
        text += added->second;
      } else if (const std::string* bytes = model_.bytes_of(id)) {
        text += *bytes;
      } else if (id < 0 || id >= vocab_size_) {
        throw_id_out_of_range(id, vocab_size_, what());
      }  // else: an id the file leaves unassigned decodes to nothing
    }
    return text;
  }

  int64_t vocab_size() const override { return vocab_size_; }
  int32_t bos_id() const override { return bos_; }
  std::optional<int32_t> special_token(std::string_view name) const override {
    auto it = special_ids_.find(std::string(name));
    if (it == special_ids_.end()) return std::nullopt;
    return it->second;
  }
  int32_t eos_id() const override { return eos_; }

 private:
  std::string what() const { return "tokenizer.json '" + path_ + "'"; }

  // A Split regex if there is one (Llama 3 style); else GPT-2's pattern when
  // a ByteLevel step splits by itself (use_regex defaults to true).
  std::string read_pre_tokenizer(const json& root) {
    std::string split_pattern;
    bool byte_level = false, byte_level_regex = false;
    auto scan = [&](const json& node) {
      if (!node.contains("type") || !node["type"].is_string()) return;
      const std::string type = node["type"];
      if (type == "ByteLevel") {
        byte_level = true;
        if (node.value("use_regex", true)) byte_level_regex = true;
      } else if (type == "Split" && node.contains("pattern") && node["pattern"].is_object()) {
        const json& p = node["pattern"];
        if (p.contains("Regex") && p["Regex"].is_string() && split_pattern.empty()) split_pattern = p["Regex"];
      }
    };
    if (root.contains("pre_tokenizer")) for_each_object(root["pre_tokenizer"], scan);
    bool pre_tokenizer_byte_level = byte_level;
    if (root.contains("decoder")) for_each_object(root["decoder"], scan);
    if (!byte_level) {
      throw Error(what() +
                  " is not a byte-level BPE (no ByteLevel pre-tokenizer or decoder); SentencePiece-style "
                  "tokenizer.json files are not supported: use the tiktoken file or a byte-level tokenizer.json");
    }
    if (!split_pattern.empty()) return split_pattern;
    if (pre_tokenizer_byte_level && byte_level_regex) return kGpt2Pattern;
    return kLlama3Pattern;
  }

  void read_vocab(const json& vocab) {
    if (!vocab.is_object()) throw Error(what() + ": model.vocab must be an object {token: id}");
    for (const auto& item : vocab.items()) {
      if (!item.value().is_number_integer() || item.value().get<int64_t>() < 0 ||
          item.value().get<int64_t>() >= kMaxVocabSize) {
        throw Error(what() + ": model.vocab[" + json(item.key()).dump() + "] must be an integer id in [0, " +
                    std::to_string(kMaxVocabSize) + "), got " + item.value().dump());
      }
      int32_t id = item.value().get<int32_t>();
      vocab_size_ = std::max<int64_t>(vocab_size_, id + 1);
      vocab_ids_.emplace(item.key(), id);
      // Strings outside the byte table (e.g. special tokens kept in the
      // vocab) are reachable only by id; merges never produce them.
      if (auto bytes = vocab_string_to_bytes(item.key())) {
        if (!model_.add_token(id, *bytes)) {
          throw Error(what() + ": model.vocab gives id " + std::to_string(id) + " or the bytes of " +
                      json(item.key()).dump() + " twice");
        }
      } else {
        added_.emplace(id, item.key());
      }
    }
  }

  void read_added_tokens(const json& root) {
    if (!root.contains("added_tokens") || !root["added_tokens"].is_array()) return;
    for (const json& token : root["added_tokens"]) {
      if (!token.is_object() || !token.contains("id") || !token["id"].is_number_integer() ||
          !token.contains("content") || !token["content"].is_string()) {
        throw Error(what() + ": every added_tokens entry needs an integer \"id\" and a string \"content\"");
      }
      int64_t id64 = token["id"].get<int64_t>();
      if (id64 < 0 || id64 >= kMaxVocabSize) {  // an unsigned id above INT64_MAX reads as negative
        throw Error(what() + ": added token " + token["content"].dump() + " has id " + token["id"].dump() +
                    ", outside [0, " + std::to_string(kMaxVocabSize) + ")");
      }
      int32_t id = static_cast<int32_t>(id64);
      std::string content = token["content"];
      added_[id] = content;
      special_ids_.emplace(content, id);
      vocab_size_ = std::max<int64_t>(vocab_size_, id + 1);
    }
  }

  void read_merges(const json& merges) {
    if (!merges.is_array()) throw Error(what() + ": model.merges must be an array");
    int32_t priority = 0;
    for (const json& merge : merges) {
      std::string left, right;
      if (merge.is_string()) {
        const std::string& text = merge.get_ref<const std::string&>();
        size_t space = text.find(' ');
        if (space == std::string::npos) throw bad_merge(priority, merge);
        left = text.substr(0, space);
        right = text.substr(space + 1);
      } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
        left = merge[0];
        right = merge[1];
      } else {
        throw bad_merge(priority, merge);
      }
      auto l = vocab_ids_.find(left), r = vocab_ids_.find(right), m = vocab_ids_.find(left + right);
      if (l == vocab_ids_.end() || r == vocab_ids_.end() || m == vocab_ids_.end()) {
        throw Error(what() + ": merge " + std::to_string(priority) + " " + merge.dump() +
                    " names a token (or a merged token) that is not in model.vocab");
      }
      model_.add_merge(l->second, r->second, m->second, priority);
      ++priority;
    }
  }

  Error bad_merge(int32_t index, const json& merge) const {
    return Error(what() + ": merge " + std::to_string(index) + " is " + merge.dump() +
                 "; expected \"left right\" or [\"left\", \"right\"]");
  }

  void find_bos_eos() {
    auto find_any = [&](std::initializer_list<const char*> names) -> int32_t {
      for (const char* name : names) {
        auto it = special_ids_.find(name);
        if (it != special_ids_.end()) return it->second;
        auto v = vocab_ids_.find(name);
        if (v != vocab_ids_.end()) return v->second;
      }
      return -1;
    };
    bos_ = find_any({"<|begin_of_text|>", "<s>", "<|bos|>", "<bos>", "<|startoftext|>"});
    eos_ = find_any({"<|end_of_text|>", "</s>", "<|eos|>", "<eos>", "<|endoftext|>"});
    if (eos_ < 0) {
      throw Error(what() +
                  " has no end-of-text token among its added tokens (looked for <|end_of_text|>, </s>, "
                  "<|eos|>, <eos>, <|endoftext|>); add one to added_tokens");
    }
    if (bos_ < 0) bos_ = eos_;  // GPT-2 style: one <|endoftext|> separates documents
  }

  std::string path_;
  std::unique_ptr<Pretokenizer> pretokenizer_;
  BpeModel model_;
  std::unordered_map<std::string, int32_t> vocab_ids_;
  std::unordered_map<std::string, int32_t> special_ids_;
  std::unordered_map<int32_t, std::string> added_;
  int64_t vocab_size_ = 0;
  int32_t bos_ = -1, eos_ = -1;
};

}  // namespace

std::unique_ptr<Tokenizer> make_hf_tokenizer(const std::string& path, const std::string& content) {
  return std::make_unique<HfTokenizer>(path, content);
}

}  // namespace titan::tokenizer
