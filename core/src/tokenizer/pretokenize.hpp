// Pre-tokenization: splits text into the pieces that BPE merges never cross,
// with a PCRE2 regex (Llama 3's by default). Every input byte lands in exactly
// one piece, invalid UTF-8 included, so encode/decode round-trips any bytes.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace titan::tokenizer {

// The pattern of Meta's Llama 3 tokenizer (tiktoken), used by Titan's trainer too.
extern const char* const kLlama3Pattern;
// The pattern of GPT-2's byte-level BPE (HF ByteLevel with use_regex: true).
extern const char* const kGpt2Pattern;

class Pretokenizer {
 public:
  // Throws titan::Error naming `origin` when the pattern does not compile.
  explicit Pretokenizer(const std::string& pattern, const std::string& origin = "built-in");
  ~Pretokenizer();
  Pretokenizer(const Pretokenizer&) = delete;
  Pretokenizer& operator=(const Pretokenizer&) = delete;

  // Appends the pieces of `text` (views into it) to `pieces`. Bytes that no
  // alternative matches (invalid UTF-8) become pieces of their own.
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;

 private:
  void* code_ = nullptr;  // pcre2_code_8*, kept opaque so pcre2.h stays in the .cpp
};

}  // namespace titan::tokenizer
