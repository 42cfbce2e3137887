// open_dataset: maps "stories" or a file path to its DocumentSource by the
// file's suffix, with one clear error for missing files and unknown formats.
#include <filesystem>

#include "sources.hpp"
#include "titan/error.hpp"

namespace titan {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

const char* const kFormats = "\"stories\", \"stories_validation\", *.jsonl, *.jsonl.gz, *.txt, *.txt.gz, *.bin, *.u16 or *.u32";

}  // namespace

std::unique_ptr<DocumentSource> open_dataset(const std::string& name_or_path, const SourceOptions& options) {
  const bool chat = options.chat_template != ChatTemplate::none;
  const bool jsonl = ends_with(name_or_path, ".jsonl") || ends_with(name_or_path, ".jsonl.gz");
  if (chat && !jsonl) {
    throw Error("dataset '" + name_or_path + "': a chat template (" + chat_template_name(options.chat_template) +
                ") reads conversations from *.jsonl or *.jsonl.gz; set chat_template: none for this dataset");
  }
  if (name_or_path == "stories") return data::make_stories_source(data::kStoriesSeed, data::kStoriesPerEpoch);
  // Held out: other stories (another seed), a tenth as many.
  if (name_or_path == "stories_validation") {
    return data::make_stories_source(data::kStoriesSeed + 1, data::kStoriesPerEpoch / 10);
  }
  const std::string& path = name_or_path;
  std::error_code ec;
  if (path.empty()) throw Error(std::string("no dataset given; use one of ") + kFormats);
  if (!std::filesystem::exists(path, ec)) {
    throw Error("dataset file '" + path + "' not found; check the dataset path in the run config (it may be " +
                kFormats + ")");
  }
  if (std::filesystem::is_directory(path, ec)) {
    throw Error("dataset '" + path + "' is a folder; give one file (" + kFormats + ")");
  }
  if (chat) return data::make_chat_source(path, options.chat_template, options.tokenizer);
  if (jsonl) return data::make_jsonl_source(path);
  if (ends_with(path, ".txt") || ends_with(path, ".txt.gz")) return data::make_text_source(path);
  if (ends_with(path, ".bin") || ends_with(path, ".u16") || ends_with(path, ".u32")) {
    return data::make_token_shard_source(path);
  }
  throw Error("dataset '" + path + "' has an unknown format; name it by its content: " + kFormats);
}

}  // namespace titan
