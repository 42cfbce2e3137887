// `titan tokenizer train CORPUS... --out FILE [--vocab-size N]`: trains a
// byte-level BPE on text files, JSONL files or the built-in `stories`.
// `titan tokenizer encode TOKENIZER FILE...`: the ids Titan gives each
// file's text (what tests compare with other tokenizer implementations).
#include <fstream>
#include <iostream>
#include <sstream>

#include "commands.h"
#include "titan/data.hpp"
#include "titan/error.hpp"
#include "titan/logging.hpp"
#include "titan/tokenizer.hpp"

namespace titan::cli {

namespace {
const char* kTokenizerUsage =
    "usage: titan tokenizer train CORPUS... --out FILE [--vocab-size N] [--max-bytes N]\n"
    "       titan tokenizer encode TOKENIZER FILE...\n"
    "  train: CORPUS is a dataset path (.jsonl, .jsonl.gz, .txt) or 'stories' (the built-in corpus);\n"
    "         writes a Hugging Face style tokenizer.json.\n"
    "  encode: TOKENIZER is a tokenizer.json, a tiktoken file or 'bytes'; prints one line per FILE,\n"
    "          the ids of its whole text (no BOS/EOS) separated by spaces.\n";

int encode_command(const Args& args) {
  if (args.size() < 3) throw Error(std::string("a tokenizer and at least one file are required\n") + kTokenizerUsage);
  auto tokenizer = load_tokenizer(args[1]);
  for (size_t i = 2; i < args.size(); ++i) {
    std::ifstream in(args[i], std::ios::binary);
    if (!in) throw Error("cannot read '" + args[i] + "': no such file or not readable");
    std::stringstream text;
    text << in.rdbuf();
    const char* separator = "";
    for (int32_t id : tokenizer->encode(text.str())) {
      std::cout << separator << id;
      separator = " ";
    }
    std::cout << "\n";
  }
  return 0;
}
}  // namespace

int tokenizer_command(const Args& args) {
  if (args.empty() || wants_help(args)) {
    std::cout << kTokenizerUsage;
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "encode") return encode_command(args);
  if (args[0] != "train") throw Error("unknown tokenizer command '" + args[0] + "'\n" + kTokenizerUsage);
  std::vector<std::string> corpora;
  std::string out;
  BpeTrainingOptions options;
  for (size_t i = 1; i < args.size(); ++i) {
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) throw Error(args[i] + " needs a value\n" + kTokenizerUsage);
      return args[++i];
    };
    if (args[i] == "--out") {
      out = value();
    } else if (args[i] == "--vocab-size") {
      options.vocab_size = std::stoll(value());
    } else if (args[i] == "--max-bytes") {
      options.max_bytes = std::stoll(value());
    } else if (args[i].rfind("--", 0) == 0) {
      throw Error("unknown option '" + args[i] + "'\n" + kTokenizerUsage);
    } else {
      corpora.push_back(args[i]);
    }
  }
  if (corpora.empty() || out.empty()) throw Error(std::string("a corpus and --out are required\n") + kTokenizerUsage);
  init_logging(0);
  std::vector<std::string> documents;
  int64_t bytes = 0;
  for (const auto& corpus : corpora) {
    auto source = open_dataset(corpus);
    while (bytes < options.max_bytes) {
      auto text = source->next_text();
      if (!text) break;
      bytes += static_cast<int64_t>(text->size());
      documents.push_back(std::move(*text));
    }
  }
  spdlog::info("training a {}-token BPE on {} documents ({:.1f} MB)", options.vocab_size, documents.size(),
               bytes / 1e6);
  train_bpe_tokenizer(documents, options, out);
  spdlog::info("wrote {}", out);
  return 0;
}

}  // namespace titan::cli
