// The "bytes" tokenizer: ids 0..255 are the bytes, 256 is BOS, 257 is EOS.
// Needs no file; handy for tests and tiny debug runs.
#include "tokenizer_kinds.hpp"

namespace titan::tokenizer {

namespace {

class ByteTokenizer final : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string text;
    text.reserve(ids.size());
    for (int32_t id : ids) {
      if (id >= 0 && id < 256) {
        text.push_back(static_cast<char>(id));
      } else if (id == kBos) {
        text += "<|begin_of_text|>";
      } else if (id == kEos) {
        text += "<|end_of_text|>";
      } else {
        throw_id_out_of_range(id, vocab_size(), "the bytes tokenizer");
      }
    }
    return text;
  }
  int64_t vocab_size() const override { return 258; }
  int32_t bos_id() const override { return kBos; }
  int32_t eos_id() const override { return kEos; }

 private:
  static constexpr int32_t kBos = 256;
  static constexpr int32_t kEos = 257;
};

}  // namespace

std::unique_ptr<Tokenizer> make_byte_tokenizer() { return std::make_unique<ByteTokenizer>(); }

}  // namespace titan::tokenizer
