// Tokenizers: tiktoken-format BPE (Llama 3's tokenizer.model), Hugging Face
// tokenizer.json BPE, and plain bytes; plus a byte-level BPE trainer.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace titan {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Plain text -> ids, without BOS/EOS. Any bytes (invalid UTF-8 too);
  // special-token names in the text are encoded as ordinary text.
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  virtual int64_t vocab_size() const = 0;  // including special tokens
  virtual int32_t bos_id() const = 0;
  virtual int32_t eos_id() const = 0;
  // The id of a special token by its name ("<|eot_id|>"), if the
  // tokenizer has one: chat templates are written in them.
  virtual std::optional<int32_t> special_token(std::string_view /*name*/) const { return std::nullopt; }
};

// `path` is a tiktoken file (base64 token + rank per line), a HF
// tokenizer.json, or the word "bytes". Errors name the file and the problem.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);

struct BpeTrainingOptions {
  int64_t vocab_size = 2048;  // including 256 byte tokens and BOS/EOS
  int64_t max_bytes = 64 << 20;  // corpus bytes read at most
};
// Trains a byte-level BPE (GPT/Llama-3 style pre-tokenization) on text
// documents and writes a HF-style tokenizer.json.
void train_bpe_tokenizer(const std::vector<std::string>& documents,
                         const BpeTrainingOptions& options, const std::string& out_path);

}  // namespace titan
