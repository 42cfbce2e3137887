// PCRE2 pre-tokenizer. Compiled with UTF + UCP (so \p{L}, \s and (?i) are
// Unicode-aware, as in tiktoken's regex engine) and MATCH_INVALID_UTF (so
// invalid bytes simply fail to match instead of making pcre2_match refuse the subject).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "pretokenize.hpp"

#include <pcre2.h>

#include <memory>

#include "titan/error.hpp"

namespace titan::tokenizer {

const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

const char* const kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {
pcre2_code* as_code(void* p) { return static_cast<pcre2_code*>(p); }
}  // namespace

Pretokenizer::Pretokenizer(const std::string& pattern, const std::string& origin) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    throw Error(origin + ": pre-tokenization regex does not compile at offset " + std::to_string(error_offset) + ": " +
                reinterpret_cast<const char*>(message) + " (pattern: " + pattern + ")");
  }
  // JIT makes matching several times faster; without it (no JIT on this CPU)
  // pcre2_match falls back to the interpreter with the same results.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  code_ = code;
}

Pretokenizer::~Pretokenizer() { pcre2_code_free(as_code(code_)); }

void Pretokenizer::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> match_data(
      pcre2_match_data_create_from_pattern(as_code(code_), nullptr), pcre2_match_data_free);
  if (!match_data) throw Error("pre-tokenizer: out of memory creating PCRE2 match data");
  pcre2_match_data* match = match_data.get();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t size = text.size();
  size_t offset = 0;
  while (offset < size) {
    int rc = pcre2_match(as_code(code_), subject, size, offset, 0, match, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) {
      pieces.push_back(text.substr(offset));  // trailing bytes nothing matches
      break;
    }
    if (rc < 0) {
      // A resource limit or similar: keep going one byte at a time rather than
      // lose text; the result still round-trips.
      pieces.push_back(text.substr(offset, 1));
      ++offset;
      continue;
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
    size_t begin = ovector[0], end = ovector[1];
    if (begin > offset) pieces.push_back(text.substr(offset, begin - offset));
    if (end <= begin) {  // the pattern cannot match empty, but never loop forever
      end = begin + 1;
    }
    pieces.push_back(text.substr(begin, end - begin));
    offset = end;
  }
}

}  // namespace titan::tokenizer
