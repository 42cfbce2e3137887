// Supervised fine-tuning data: conversations rendered with Llama 3's and
// ChatML's templates, checked token by token against the published Jinja
// templates tokenized by Hugging Face's `tokenizers`
// (tests/python/chat_reference.py); the chat source's errors; the loader's
// labels and its count of the labels that carry loss.
#include "doctest_torch.hpp"

#include <ATen/ATen.h>

#include <nlohmann/json.hpp>

#include "error_of.hpp"
#include "test_support.hpp"
#include "titan/data.hpp"
#include "titan/error.hpp"
#include "titan/tokenizer.hpp"

namespace {

using titan::ChatTemplate;

const char* const kChatSpecials[] = {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|im_start|>",
                                     "<|im_end|>"};

// A byte-level BPE trained here, with the two templates' special tokens
// added after its vocabulary.
std::string chat_tokenizer_file(const std::filesystem::path& dir) {
  const std::string path = (dir / "chat_tokenizer.json").string();
  titan::train_bpe_tokenizer({"The user asks and the assistant answers. What is two plus two? It is four.",
                              "Hello there! How are you today? I am fine, thank you."},
                             titan::BpeTrainingOptions{320, 1 << 20}, path);
  nlohmann::json root = nlohmann::json::parse(titan::test::read_file(path));
  int64_t id = 0;
  for (const auto& token : root["added_tokens"]) id = std::max<int64_t>(id, token["id"].get<int64_t>() + 1);
  for (const char* name : kChatSpecials) {
    root["added_tokens"].push_back({{"id", id++}, {"content", name}, {"single_word", false}, {"lstrip", false},
                                    {"rstrip", false}, {"normalized", false}, {"special", true}});
  }
  titan::test::write_file(path, root.dump());
  return path;
}

const char* const kConversations =
    R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is two plus two?"}, {"role": "assistant", "content": "It is four."}, {"role": "user", "content": "Thank you!"}, {"role": "assistant", "content": "  You are welcome.\n"}]})"
    "\n"
    R"({"messages": [{"role": "user", "content": "Hello there, ünïcode?"}, {"role": "assistant", "content": "Hello: I am fine (today)."}]})"
    "\n";

std::vector<titan::ChatMessage> messages_in(const std::string& line) {
  std::vector<titan::ChatMessage> messages;
  const nlohmann::json record = nlohmann::json::parse(line);
  for (const auto& m : record["messages"]) messages.push_back({m["role"], m["content"]});
  return messages;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(line);
  }
  return lines;
}

}  // namespace

TEST_CASE("llama3 and chatml: the rendered text, and only the assistant's replies carry loss") {
  const auto dir = titan::test::temp_dir("chat_render");
  auto tokenizer = titan::load_tokenizer(chat_tokenizer_file(dir));
  const auto messages = messages_in(lines_of(kConversations)[0]);
  struct Case {
    ChatTemplate chat_template;
    const char *text, *learned;
  };
  const Case cases[] = {
      {ChatTemplate::llama3,
       "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
       "<|start_header_id|>user<|end_header_id|>\n\nWhat is two plus two?<|eot_id|>"
       "<|start_header_id|>assistant<|end_header_id|>\n\nIt is four.<|eot_id|>"
       "<|start_header_id|>user<|end_header_id|>\n\nThank you!<|eot_id|>"
       "<|start_header_id|>assistant<|end_header_id|>\n\nYou are welcome.<|eot_id|><|end_of_text|>",
       "It is four.<|eot_id|>You are welcome.<|eot_id|>"},
      {ChatTemplate::chatml,
       "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is two plus two?<|im_end|>\n"
       "<|im_start|>assistant\nIt is four.<|im_end|>\n<|im_start|>user\nThank you!<|im_end|>\n"
       "<|im_start|>assistant\n  You are welcome.\n<|im_end|>\n<|end_of_text|>",
       "It is four.<|im_end|>  You are welcome.\n<|im_end|>"}};
  for (const Case& c : cases) {
    CAPTURE(titan::chat_template_name(c.chat_template));
    const std::vector<int32_t> rendered = titan::render_chat(messages, c.chat_template, *tokenizer);
    std::vector<int32_t> ids, learned;
    for (int32_t token : rendered) {
      const auto id = static_cast<int32_t>(titan::token_id(token));
      ids.push_back(id);
      if ((token & titan::kContextOnly) == 0) learned.push_back(id);
    }
    CHECK(tokenizer->decode(ids) == c.text);
    CHECK(tokenizer->decode(learned) == c.learned);
    // Every learned token is one of the replies' or an end of turn, in one piece each.
    CHECK(static_cast<size_t>(std::count_if(rendered.begin(), rendered.end(), [](int32_t t) {
            return (t & titan::kContextOnly) == 0;
          })) == learned.size());
  }
}

TEST_CASE("the rendering equals the published templates through Hugging Face's tokenizers, token by token") {
  const std::string python = titan::test::source_dir() + "/.venv/bin/python";
  if (titan::test::run_command(python + " -c 'import tokenizers, jinja2'").exit_code != 0) {
    MESSAGE("TITAN_SKIPPED: tokenizers or jinja2 not in .venv (scripts/setup.sh installs them for the tests)");
    return;
  }
  const auto dir = titan::test::temp_dir("chat_reference");
  const std::string tokenizer_path = chat_tokenizer_file(dir);
  auto tokenizer = titan::load_tokenizer(tokenizer_path);
  titan::test::write_file(dir / "chats.jsonl", kConversations);
  for (ChatTemplate chat_template : {ChatTemplate::llama3, ChatTemplate::chatml}) {
    const std::string name = titan::chat_template_name(chat_template);
    CAPTURE(name);
    auto result = titan::test::run_command("timeout 60 " + python + " " + titan::test::source_dir() +
                                           "/tests/python/chat_reference.py " + tokenizer_path + " " +
                                           (dir / "chats.jsonl").string() + " " + name);
    REQUIRE_MESSAGE(result.exit_code == 0, result.output);
    const auto references = lines_of(result.output), conversations = lines_of(kConversations);
    REQUIRE(references.size() == conversations.size());
    for (size_t i = 0; i < conversations.size(); ++i) {
      const nlohmann::json reference = nlohmann::json::parse(references[i]);
      const std::vector<int32_t> rendered = titan::render_chat(messages_in(conversations[i]), chat_template, *tokenizer);
      std::vector<int32_t> ids;
      std::vector<int> loss;
      for (int32_t token : rendered) {
        ids.push_back(static_cast<int32_t>(titan::token_id(token)));
        loss.push_back((token & titan::kContextOnly) == 0 ? 1 : 0);
      }
      CHECK(ids == reference["ids"].get<std::vector<int32_t>>());
      CHECK(loss == reference["loss"].get<std::vector<int>>());
    }
  }
}

TEST_CASE("chat datasets: errors name the file, the line and the missing token") {
  const auto dir = titan::test::temp_dir("chat_errors");
  std::shared_ptr<const titan::Tokenizer> tokenizer = titan::load_tokenizer(chat_tokenizer_file(dir));
  const titan::SourceOptions llama3{ChatTemplate::llama3, tokenizer};
  using titan::test::error_of;
  titan::test::write_file(dir / "bad.jsonl", std::string(lines_of(kConversations)[0]) +
                                                 "\n{\"messages\": [{\"role\": \"user\", \"content\": 3}]}\n");
  auto source = titan::open_dataset((dir / "bad.jsonl").string(), llama3);
  CHECK(source->next_tokens().has_value());
  const std::string bad = error_of([&] { source->next_tokens(); });
  CHECK(titan::test::has(bad, "bad.jsonl' line 2"));
  CHECK(titan::test::has(bad, "message 0 without a string \"content\""));
  titan::test::write_file(dir / "text.jsonl", "{\"text\": \"plain\"}\n");
  CHECK(titan::test::has(error_of([&] { titan::open_dataset((dir / "text.jsonl").string(), llama3); }),
                         "text.jsonl' line 1: expected a conversation"));
  titan::test::write_file(dir / "chats.txt", "a\n");
  CHECK(titan::test::has(error_of([&] { titan::open_dataset((dir / "chats.txt").string(), llama3); }),
                         "reads conversations from *.jsonl"));
  titan::test::write_file(dir / "chats.jsonl", kConversations);
  const titan::SourceOptions bytes{ChatTemplate::chatml, titan::load_tokenizer("bytes")};
  CHECK(titan::test::has(error_of([&] { titan::open_dataset((dir / "chats.jsonl").string(), bytes); }),
                         "chatml is written in the special token <|im_start|>, which the tokenizer does not have"));
  CHECK_THROWS_WITH_AS(titan::chat_template_named("alpaca"), doctest::Contains("expected none, llama3 or chatml"),
                       titan::Error);
}

TEST_CASE("the loader's labels: prompts carry no loss, the inputs are plain ids, the count is the global one") {
  const auto dir = titan::test::temp_dir("chat_loader");
  std::shared_ptr<const titan::Tokenizer> tokenizer = titan::load_tokenizer(chat_tokenizer_file(dir));
  titan::test::write_file(dir / "chats.jsonl", kConversations);
  const titan::SourceOptions options{ChatTemplate::llama3, tokenizer};
  for (titan::Packing packing : {titan::Packing::concat_then_split, titan::Packing::first_fit}) {
    CAPTURE(static_cast<int>(packing));
    // Two data-parallel ranks: each counts both ranks' labels.
    int64_t counted = 0, global = -1;
    for (int rank = 0; rank < 2; ++rank) {
      titan::TokenWindowLoader loader(titan::open_dataset((dir / "chats.jsonl").string(), options), tokenizer, 24,
                                      rank, 2);
      loader.set_packing(packing);
      const at::Tensor windows = loader.next_batch(3);
      titan::DocumentOptions documents;
      documents.boundaries = {tokenizer->bos_id(), tokenizer->eos_id()};
      documents.packing = packing;
      documents.context_only_tokens = true;
      const titan::Microbatch batch = titan::microbatch_of(windows, at::kCPU, documents);
      CHECK(batch.inputs.max().item<int64_t>() < tokenizer->vocab_size());
      CHECK(batch.inputs.min().item<int64_t>() >= 0);
      const int64_t* raw = windows.data_ptr<int64_t>();
      const int64_t* label = batch.labels.data_ptr<int64_t>();
      for (int64_t row = 0; row < 3; ++row) {
        for (int64_t i = 0; i < 24; ++i) {
          const int64_t next = raw[row * 25 + i + 1];
          const bool learned = next != titan::kPaddingToken && (next & titan::kContextOnly) == 0;
          CHECK(label[row * 24 + i] == (learned ? next : titan::kIgnoredLabel));
          counted += learned;
        }
      }
      if (global >= 0) CHECK(loader.global_labels() == global);
      global = loader.global_labels();
    }
    CHECK(counted == global);
    CHECK(global > 0);
    CHECK(global < 2 * 3 * 24);  // the prompts are most of each window
  }
}
