// open_dataset: maps "stories", a file, a folder of shards or a glob to its
// DocumentSource by the files' suffixes, with one clear error for missing
// files and unknown formats.
#include <glob.h>

#include <algorithm>
#include <filesystem>

#include "sources.hpp"
#include "titan/error.hpp"

namespace titan {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool ends_with_any(const std::string& s, std::initializer_list<const char*> suffixes) {
  return std::any_of(suffixes.begin(), suffixes.end(), [&](const char* suffix) { return ends_with(s, suffix); });
}

const char* const kFormats =
    "\"stories\", \"stories_validation\", or files, a folder or a glob of *.jsonl, *.jsonl.gz, *.jsonl.zst, "
    "*.parquet, *.txt, *.txt.gz, *.txt.zst, *.bin, *.u16 or *.u32";

enum class Format { unknown, jsonl, text, parquet, token_shard };

Format format_of(const std::string& path) {
  if (ends_with_any(path, {".jsonl", ".jsonl.gz", ".jsonl.zst"})) return Format::jsonl;
  if (ends_with_any(path, {".txt", ".txt.gz", ".txt.zst"})) return Format::text;
  if (ends_with(path, ".parquet")) return Format::parquet;
  if (ends_with_any(path, {".bin", ".u16", ".u32"})) return Format::token_shard;
  return Format::unknown;
}

bool is_pattern(const std::string& path) { return path.find_first_of("*?[") != std::string::npos; }

// The shards of a folder (its files in a known format) or of a glob, sorted
// by name: the order they are read in.
std::vector<std::string> shard_files(const std::string& path) {
  std::vector<std::string> files;
  if (is_pattern(path)) {
    glob_t found{};
    if (::glob(path.c_str(), 0, nullptr, &found) == 0) {
      for (size_t i = 0; i < found.gl_pathc; ++i) files.emplace_back(found.gl_pathv[i]);
    }
    globfree(&found);
    files.erase(std::remove_if(files.begin(), files.end(),
                               [](const std::string& file) { return std::filesystem::is_directory(file); }),
                files.end());
  } else {
    for (const auto& entry : std::filesystem::directory_iterator(path)) {
      if (entry.is_regular_file() && format_of(entry.path().string()) != Format::unknown) {
        files.push_back(entry.path().string());
      }
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    const std::string which = is_pattern(path) ? "" : " in a format Titan reads";
    throw Error("dataset '" + path + "' matches no files" + which + "; expected " + kFormats);
  }
  return files;
}

std::unique_ptr<DocumentSource> open_format(const std::string& path, const SourceOptions& options) {
  const Format format = format_of(path);
  if (options.chat_template != ChatTemplate::none && format != Format::jsonl) {
    throw Error("dataset '" + path + "': a chat template (" + chat_template_name(options.chat_template) +
                ") reads conversations from *.jsonl, *.jsonl.gz or *.jsonl.zst; set chat_template: none for it");
  }
  switch (format) {
    case Format::jsonl:
      if (options.chat_template != ChatTemplate::none) {
        return data::make_chat_source(path, options.chat_template, options.tokenizer);
      }
      return data::make_jsonl_source(path, options.text_field);
    case Format::text:
      return data::make_text_source(path);
    case Format::parquet:
      return data::make_parquet_source(path, options.text_field);
    case Format::token_shard:
      return data::make_token_shard_source(path);
    case Format::unknown:
      break;
  }
  throw Error("dataset '" + path + "' has an unknown format; name it by its content: " + kFormats);
}

std::unique_ptr<DocumentSource> open_file(const std::string& path, const SourceOptions& options) {
  return data::counted(open_format(path, options));
}

}  // namespace

std::unique_ptr<DocumentSource> open_dataset(const std::string& name_or_path, const SourceOptions& options) {
  if (name_or_path == "stories") {
    return data::counted(data::make_stories_source(data::kStoriesSeed, data::kStoriesPerEpoch));
  }
  // Held out: other stories (another seed), a tenth as many.
  if (name_or_path == "stories_validation") {
    return data::counted(data::make_stories_source(data::kStoriesSeed + 1, data::kStoriesPerEpoch / 10));
  }
  const std::string& path = name_or_path;
  std::error_code ec;
  if (path.empty()) throw Error(std::string("no dataset given; use one of ") + kFormats);
  const bool folder = std::filesystem::is_directory(path, ec);
  if (!folder && !is_pattern(path) && !std::filesystem::exists(path, ec)) {
    throw Error("dataset file '" + path + "' not found; check the dataset path in the run config (it may be " +
                kFormats + ")");
  }
  if (!folder && !is_pattern(path)) return open_file(path, options);
  const std::vector<std::string> files = shard_files(path);
  const Format format = format_of(files.front());
  for (const std::string& file : files) {
    if (format_of(file) == format) continue;
    throw Error("dataset '" + path + "' mixes formats ('" + files.front() + "' and '" + file +
                "'); give each format its own entry in training.datasets");
  }
  return data::make_sharded_source(path, files,
                                   [options](const std::string& file) { return open_file(file, options); });
}

}  // namespace titan
