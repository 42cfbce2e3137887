// Fuzz target: flight recorder dumps as `titan fr-analyze` reads them
// (load_dumps), then the analysis and both renderings of it.
// Input: up to four dumps separated by NUL bytes, written as
// flight_recorder/rank_<i>.json.
#include <cstdint>

#include "fr_analysis.h"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::filesystem::path run = titan::fuzz::scratch_dir() / "run";
  static const std::filesystem::path folder = run / "flight_recorder";
  std::error_code ignored;
  std::filesystem::remove_all(folder, ignored);  // no dump of the previous input may remain
  std::filesystem::create_directories(folder);
  std::string_view rest = titan::fuzz::as_text(data, size);
  for (int rank = 0; rank < 4; ++rank) {
    auto [dump, tail] = titan::fuzz::split_at_nul(rest);
    titan::fuzz::write_file(folder / ("rank_" + std::to_string(rank) + ".json"), dump);
    if (tail.data() == nullptr || tail.empty()) break;
    rest = tail;
  }
  titan::fuzz::expect_clean_refusal([&] {
    namespace fr = titan::cli::fr;
    fr::Analysis analysis = fr::analyze(fr::load_dumps(run.string()));
    fr::render_text(analysis);
    fr::render_json(analysis);
  });
  return 0;
}
