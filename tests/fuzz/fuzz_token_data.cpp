// Fuzz target: the dataset files the data loader reads without a
// tokenizer in between: pre-tokenized shards (*.bin, with or without
// llm.c's 256-int header; raw *.u16 and *.u32), and *.jsonl documents.
// Input: one byte choosing the file's suffix, then the file.
#include <cstdint>

#include "fuzz_support.hpp"
#include "sources.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const char* const kSuffixes[] = {".bin", ".u16", ".u32", ".jsonl"};
  const char* suffix = kSuffixes[data[0] % 4];
  std::filesystem::path path = titan::fuzz::scratch_dir() / (std::string("data") + suffix);
  titan::fuzz::write_file(path, titan::fuzz::as_text(data + 1, size - 1));
  titan::fuzz::expect_clean_refusal([&] {
    bool pretokenized = data[0] % 4 != 3;
    auto source = pretokenized ? titan::data::make_token_shard_source(path.string())
                               : titan::data::make_jsonl_source(path.string());
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
