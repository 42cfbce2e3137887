// Fuzz target: a Hugging Face tokenizer.json (byte-level BPE: vocab,
// merges, added tokens, the pre-tokenizer regex), then the tokenizer in
// use: encode some text and decode the ids, plus ids at the edges.
// Input: the file, optionally a NUL and the text to encode.
#include <cstdint>

#include "fuzz_support.hpp"
#include "tokenizer_fuzzing.hpp"
#include "tokenizer_kinds.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto [file, text] = titan::fuzz::split_at_nul(titan::fuzz::as_text(data, size));
  titan::fuzz::expect_clean_refusal([&, file = file, text = text] {
    auto tokenizer = titan::tokenizer::make_hf_tokenizer("fuzz/tokenizer.json", std::string(file));
    titan::fuzz::use_tokenizer(*tokenizer, text);
  });
  return 0;
}
