// Fuzz target: the dataset files the data loader reads: pre-tokenized
// shards (*.bin, with or without llm.c's 256-int header; raw *.u16 and
// *.u32), *.jsonl documents, zstd-compressed *.jsonl.zst, and chat
// conversations rendered with Llama 3's template.
// Input: one byte choosing the file's kind, then the file.
// (The .jsonl.zst and chat seeds were written with the zstd tool and by
// hand; make_seeds writes the others.)
#include <cstdint>

#include "fuzz_support.hpp"
#include "sources.hpp"

namespace {

// Bytes, BOS/EOS and Llama 3's chat tokens: enough to render conversations.
class ChatBytes final : public titan::Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override {
    return std::vector<int32_t>(text.begin(), text.end());
  }
  std::string decode(const std::vector<int32_t>& ids) const override { return std::string(ids.begin(), ids.end()); }
  int64_t vocab_size() const override { return 261; }
  int32_t bos_id() const override { return 256; }
  int32_t eos_id() const override { return 257; }
  std::optional<int32_t> special_token(std::string_view name) const override {
    if (name == "<|start_header_id|>") return 258;
    if (name == "<|end_header_id|>") return 259;
    if (name == "<|eot_id|>") return 260;
    return std::nullopt;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  enum Kind { bin, u16, u32, jsonl, jsonl_zst, chat, kinds };
  static const char* const kSuffixes[kinds] = {".bin", ".u16", ".u32", ".jsonl", ".jsonl.zst", ".jsonl"};
  const int kind = data[0] % kinds;
  std::filesystem::path path = titan::fuzz::scratch_dir() / (std::string("data") + kSuffixes[kind]);
  titan::fuzz::write_file(path, titan::fuzz::as_text(data + 1, size - 1));
  titan::fuzz::expect_clean_refusal([&] {
    const bool pretokenized = kind <= u32 || kind == chat;
    std::unique_ptr<titan::DocumentSource> source;
    if (kind <= u32) {
      source = titan::data::make_token_shard_source(path.string());
    } else if (kind == chat) {
      source = titan::data::make_chat_source(path.string(), titan::ChatTemplate::llama3, std::make_shared<ChatBytes>());
    } else {
      source = titan::data::make_jsonl_source(path.string());
    }
    source->describe();
    // Two passes, as a second epoch does.
    for (int epoch = 0; epoch < 2; ++epoch) {
      if (pretokenized) {
        while (source->next_tokens()) {
        }
      } else {
        while (source->next_text()) {
        }
      }
      source->rewind();
    }
  });
  std::error_code ignored;
  std::filesystem::remove(path, ignored);
  return 0;
}
