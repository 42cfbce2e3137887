// load_tokenizer: picks the tokenizer kind from the path ("bytes", a
// tokenizer.json, a tiktoken file, or a folder holding one) and reads the file.
#include <filesystem>
#include <fstream>
#include <sstream>

#include "titan/error.hpp"
#include "tokenizer_kinds.hpp"

namespace titan {

namespace tokenizer {

void throw_id_out_of_range(int32_t id, int64_t vocab_size, const std::string& tokenizer) {
  throw Error("cannot decode token id " + std::to_string(id) + " with " + tokenizer + ": ids must be in [0, " +
              std::to_string(vocab_size) + ")");
}

}  // namespace tokenizer

namespace {

const char* const kHowToSet =
    "set model.tokenizer_path to a tiktoken file (Llama 3's original/tokenizer.model), a Hugging Face "
    "tokenizer.json, or \"bytes\"";

std::string resolve_folder(const std::string& path) {
  namespace fs = std::filesystem;
  for (const char* name : {"tokenizer.json", "tokenizer.model", "original/tokenizer.model"}) {
    fs::path candidate = fs::path(path) / name;
    std::error_code ec;
    if (fs::is_regular_file(candidate, ec)) return candidate.string();
  }
  throw Error("tokenizer folder '" + path + "' holds no tokenizer.json, tokenizer.model or original/tokenizer.model; " +
              kHowToSet);
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path_or_name) {
  if (path_or_name == "bytes") return tokenizer::make_byte_tokenizer();
  if (path_or_name.empty()) throw Error(std::string("no tokenizer given; ") + kHowToSet);
  std::error_code ec;
  std::string path = path_or_name;
  if (!std::filesystem::exists(path, ec)) {
    throw Error("tokenizer file '" + path + "' not found; " + kHowToSet);
  }
  if (std::filesystem::is_directory(path, ec)) path = resolve_folder(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("tokenizer file '" + path + "' cannot be opened for reading; check its permissions");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  const std::string content = buffer.str();
  size_t first = content.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) throw Error("tokenizer file '" + path + "' is empty; " + kHowToSet);
  if (content[first] == '{') return tokenizer::make_hf_tokenizer(path, content);
  return tokenizer::make_tiktoken_tokenizer(path, content);
}

}  // namespace titan
