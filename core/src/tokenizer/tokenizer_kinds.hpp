// Constructors of the tokenizer kinds that load_tokenizer dispatches to, and
// helpers they share. Private to core/src/tokenizer.
#pragma once
#include <memory>
#include <string>

#include "titan/tokenizer.hpp"

namespace titan::tokenizer {

std::unique_ptr<Tokenizer> make_byte_tokenizer();
// `content` is the whole file; `path` is only for messages.
std::unique_ptr<Tokenizer> make_tiktoken_tokenizer(const std::string& path, const std::string& content);
std::unique_ptr<Tokenizer> make_hf_tokenizer(const std::string& path, const std::string& content);

[[noreturn]] void throw_id_out_of_range(int32_t id, int64_t vocab_size, const std::string& tokenizer);

}  // namespace titan::tokenizer
