// Conversations for supervised fine-tuning: *.jsonl(.gz) with one
// {"messages": [{"role": ..., "content": ...}, ...]} per line, rendered with
// a chat template into ids whose prompts are marked kContextOnly.
#include <nlohmann/json.hpp>

#include "sources.hpp"
#include "titan/error.hpp"

namespace titan::data {

namespace {

class ChatSource final : public DocumentSource {
 public:
  ChatSource(const std::string& path, ChatTemplate chat_template, std::shared_ptr<const Tokenizer> tokenizer)
      : path_(path),
        lines_(path, "a conversation {\"messages\": [{\"role\": ..., \"content\": ...}, ...]}"),
        template_(chat_template),
        tokenizer_(std::move(tokenizer)) {
    if (!tokenizer_) throw Error("chat dataset '" + path + "': no tokenizer to render it with");
    check_chat_tokenizer(template_, *tokenizer_);
    // Fail at startup, not hours later, when nothing is there to train on.
    if (!next_tokens()) throw Error("dataset '" + path_ + "' contains no conversations (no JSON lines)");
    lines_.rewind();
  }

  std::string describe() const override {
    return "chat dataset '" + path_ + "' (" + chat_template_name(template_) + " template)";
  }
  void rewind() override { lines_.rewind(); }
  std::optional<std::string> next_text() override { return std::nullopt; }  // ids come from next_tokens()
  bool pretokenized() const override { return true; }
  bool marks_context_only() const override { return true; }

  std::optional<std::vector<int32_t>> next_tokens() override {
    nlohmann::json record;
    if (!lines_.next(record)) return std::nullopt;
    return render_chat(messages_of(record), template_, *tokenizer_);
  }

 private:
  std::vector<ChatMessage> messages_of(const nlohmann::json& record) const {
    auto messages = record.find("messages");
    if (messages == record.end()) throw malformed("an object without \"messages\"");
    if (!messages->is_array() || messages->empty()) throw malformed("\"messages\" that is not a non-empty array");
    std::vector<ChatMessage> out;
    for (const nlohmann::json& message : *messages) {
      const std::string which = "message " + std::to_string(out.size());
      if (!message.is_object()) throw malformed(which + " of type " + message.type_name());
      auto role = message.find("role"), content = message.find("content");
      if (role == message.end() || !role->is_string()) throw malformed(which + " without a string \"role\"");
      if (content == message.end() || !content->is_string()) throw malformed(which + " without a string \"content\"");
      out.push_back({role->get<std::string>(), content->get<std::string>()});
    }
    return out;
  }

  Error malformed(const std::string& got) const { return lines_.malformed(got); }

  std::string path_;
  JsonLines lines_;
  ChatTemplate template_;
  std::shared_ptr<const Tokenizer> tokenizer_;
};

}  // namespace

std::unique_ptr<DocumentSource> make_chat_source(const std::string& path, ChatTemplate chat_template,
                                                 std::shared_ptr<const Tokenizer> tokenizer) {
  return std::make_unique<ChatSource>(path, chat_template, std::move(tokenizer));
}

}  // namespace titan::data
