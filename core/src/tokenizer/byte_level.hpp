// GPT-2's byte <-> unicode table, which byte-level tokenizer.json files use to
// write arbitrary token bytes as printable vocab strings.
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace titan::tokenizer {

// Token bytes -> the vocab string of a byte-level tokenizer.json (UTF-8).
std::string bytes_to_vocab_string(std::string_view bytes);
// The inverse; nullopt if `text` is not UTF-8 or holds a character outside the table.
std::optional<std::string> vocab_string_to_bytes(std::string_view text);

}  // namespace titan::tokenizer
