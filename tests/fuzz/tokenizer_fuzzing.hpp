// What the tokenizer targets do with a tokenizer that loaded: what the data
// loader and `titan tokenizer` do with it.
#pragma once
#include <string_view>

#include "titan/tokenizer.hpp"

namespace titan::fuzz {

inline void use_tokenizer(const Tokenizer& tokenizer, std::string_view text) {
  // Plain words, UTF-8, a stray continuation byte, a run of spaces longer
  // than the short-piece path of the BPE merge, digits, a special token name.
  static const std::string sample = "Once upon a time, \xc3\xa9t\xc3\xa9 \x80 12345 <|end_of_text|>" +
                                    std::string(80, ' ') + "end.\r\n";
  std::string_view input = text.empty() ? std::string_view(sample) : text;
  std::vector<int32_t> ids = tokenizer.encode(input);
  tokenizer.decode(ids);
  int64_t vocab = tokenizer.vocab_size();
  std::vector<int32_t> edges = {0, tokenizer.bos_id(), tokenizer.eos_id()};
  if (vocab > 0 && vocab <= INT32_MAX) edges.push_back(static_cast<int32_t>(vocab - 1));
  tokenizer.decode(edges);
}

}  // namespace titan::fuzz
