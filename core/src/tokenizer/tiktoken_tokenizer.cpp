// Tiktoken-format BPE (Llama 3's tokenizer.model): "<base64 bytes> <rank>"
// per line, rank = token id; Meta's 256 special tokens follow the base vocab.
#include <algorithm>

#include "bpe.hpp"
#include "pretokenize.hpp"
#include "titan/error.hpp"
#include "tokenizer_kinds.hpp"

namespace titan::tokenizer {

namespace {

constexpr int kSpecialTokenCount = 256;  // Llama 3's num_reserved_special_tokens

// Names in the order of Meta's llama3 tokenizer.py; the rest are reserved.
std::vector<std::string> llama3_special_tokens() {
  std::vector<std::string> names = {"<|begin_of_text|>",
                                    "<|end_of_text|>",
                                    "<|reserved_special_token_0|>",
                                    "<|reserved_special_token_1|>",
                                    "<|finetune_right_pad_id|>",
                                    "<|step_id|>",
                                    "<|start_header_id|>",
                                    "<|end_header_id|>",
                                    "<|eom_id|>",
                                    "<|eot_id|>",
                                    "<|python_tag|>"};
  for (int i = 2; names.size() < static_cast<size_t>(kSpecialTokenCount); ++i) {
    names.push_back("<|reserved_special_token_" + std::to_string(i) + "|>");
  }
  return names;
}

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// Standard base64 with optional '=' padding; false on any other character.
bool decode_base64(std::string_view text, std::string& out) {
  out.clear();
  uint32_t accumulator = 0;
  int bits = 0;
  size_t end = text.size();
  while (end > 0 && text[end - 1] == '=') --end;
  if (text.size() - end > 2) return false;
  for (size_t i = 0; i < end; ++i) {
    int v = base64_value(text[i]);
    if (v < 0) return false;
    accumulator = (accumulator << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((accumulator >> bits) & 0xFF));
    }
  }
  return true;
}

class TiktokenTokenizer final : public Tokenizer {
 public:
  TiktokenTokenizer(const std::string& path, const std::string& content)
      : path_(path), pretokenizer_(kLlama3Pattern), special_(llama3_special_tokens()) {
    size_t line_start = 0;
    int64_t line_number = 0;
    int32_t max_rank = -1;
    std::string bytes;
    while (line_start < content.size()) {
      size_t line_end = content.find('\n', line_start);
      if (line_end == std::string::npos) line_end = content.size();
      std::string_view line(content.data() + line_start, line_end - line_start);
      line_start = line_end + 1;
      ++line_number;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
      size_t space = line.find(' ');
      int64_t rank = -1;
      if (space != std::string_view::npos) rank = parse_rank(line.substr(space + 1));
      if (space == std::string_view::npos || rank < 0 || !decode_base64(line.substr(0, space), bytes) ||
          bytes.empty()) {
        throw Error(where(line_number) + ": expected \"<base64 token bytes> <rank>\", got \"" +
                    std::string(line.substr(0, 80)) +
                    "\"; is this really a tiktoken file (Llama 3's tokenizer.model)?");
      }
      if (rank >= kMaxVocabSize) {
        throw Error(where(line_number) + ": rank " + std::to_string(rank) + " is not below " +
                    std::to_string(kMaxVocabSize) + "; the file is corrupt");
      }
      if (!model_.add_token(static_cast<int32_t>(rank), bytes)) {
        throw Error(where(line_number) + ": rank " + std::to_string(rank) +
                    " or its token bytes appear twice; the file is corrupt");
      }
      max_rank = std::max(max_rank, static_cast<int32_t>(rank));
    }
    if (max_rank < 0) throw Error("tiktoken file '" + path + "' holds no tokens");
    int missing = model_.first_missing_byte();
    if (missing >= 0) {
      throw Error("tiktoken file '" + path + "' has no token for the single byte " + std::to_string(missing) +
                  ", so some text could not be encoded; a byte-level BPE needs all 256");
    }
    model_.add_merges_from_vocab();
    model_.set_whole_piece_lookup(true);
    base_vocab_ = max_rank + 1;
  }

  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<std::string_view> pieces;
    pretokenizer_.split(text, pieces);
    std::vector<int32_t> ids;
    ids.reserve(text.size() / 3 + 1);
    for (std::string_view piece : pieces) model_.encode_piece(piece, ids);
    return ids;
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string text;
    for (int32_t id : ids) {
      if (const std::string* bytes = model_.bytes_of(id)) {
        text += *bytes;
      } else if (id >= base_vocab_ && id < vocab_size()) {
        text += special_[static_cast<size_t>(id - base_vocab_)];
      } else {
        throw_id_out_of_range(id, vocab_size(), "tiktoken tokenizer '" + path_ + "'");
      }
    }
    return text;
  }

  int64_t vocab_size() const override { return static_cast<int64_t>(base_vocab_) + kSpecialTokenCount; }
  int32_t bos_id() const override { return base_vocab_; }
  int32_t eos_id() const override { return base_vocab_ + 1; }
  std::optional<int32_t> special_token(std::string_view name) const override {
    for (size_t i = 0; i < special_.size(); ++i) {
      if (special_[i] == name) return base_vocab_ + static_cast<int32_t>(i);
    }
    return std::nullopt;
  }

 private:
  std::string where(int64_t line_number) const {
    return "tiktoken file '" + path_ + "' line " + std::to_string(line_number);
  }
  static int64_t parse_rank(std::string_view text) {
    while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
    if (text.empty() || text.size() > 9) return -1;
    int64_t value = 0;
    for (char c : text) {
      if (c < '0' || c > '9') return -1;
      value = value * 10 + (c - '0');
    }
    return value;
  }

  std::string path_;
  Pretokenizer pretokenizer_;
  std::vector<std::string> special_;
  BpeModel model_;
  int32_t base_vocab_ = 0;
};

}  // namespace

std::unique_ptr<Tokenizer> make_tiktoken_tokenizer(const std::string& path, const std::string& content) {
  return std::make_unique<TiktokenTokenizer>(path, content);
}

}  // namespace titan::tokenizer
