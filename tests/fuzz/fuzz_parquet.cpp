// Fuzz target: a *.parquet dataset file as the data loader reads it (the
// text column through Arrow's reader, core/parquet/). Arrow's own parsers
// are fuzzed upstream; this checks Titan's side: every damaged file ends in
// an error naming it, never a crash. Input: the file.
#include <cstdint>

#include "fuzz_support.hpp"
#include "sources.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::filesystem::path path = titan::fuzz::scratch_dir() / "data.parquet";
  titan::fuzz::write_file(path, titan::fuzz::as_text(data, size));
  titan::fuzz::expect_clean_refusal([&] {
    auto source = titan::data::make_parquet_source(path.string(), "text");
    // Two passes, as a second epoch does.
    for (int epoch = 0; epoch < 2; ++epoch) {
      while (source->next_text()) {
      }
      source->rewind();
    }
  });
  std::error_code ignored;
  std::filesystem::remove(path, ignored);
  return 0;
}
