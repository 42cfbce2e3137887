// Chat templates: a conversation rendered as token ids, its prompts marked
// kContextOnly so that only the assistant's replies carry loss.
#include "titan/data.hpp"
#include "titan/error.hpp"

namespace titan {

namespace {

// Each template: its name and the special tokens it is written in.
struct TemplateTokens {
  ChatTemplate chat_template;
  const char* name;
  const char* begin_turn;
  const char* end_header;  // null: the role ends with a newline instead
  const char* end_turn;
};

constexpr TemplateTokens kTemplates[] = {
    {ChatTemplate::none, "none", nullptr, nullptr, nullptr},
    {ChatTemplate::llama3, "llama3", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"},
    {ChatTemplate::chatml, "chatml", "<|im_start|>", nullptr, "<|im_end|>"},
};

const TemplateTokens& template_of(ChatTemplate chat_template) {
  for (const TemplateTokens& spec : kTemplates) {
    if (spec.chat_template == chat_template) return spec;
  }
  return kTemplates[0];
}

const TemplateTokens& tokens_of(ChatTemplate chat_template) {
  if (chat_template == ChatTemplate::none) throw Error("chat template: none was chosen (training.chat_template)");
  return template_of(chat_template);
}

int32_t special_id(const Tokenizer& tokenizer, ChatTemplate chat_template, const char* name) {
  if (auto id = tokenizer.special_token(name)) return *id;
  throw Error("training.chat_template: " + chat_template_name(chat_template) + " is written in the special token " +
              name + ", which the tokenizer does not have; use a tokenizer made for it (tokenizer_path) or "
              "another template");
}

std::string_view trimmed(std::string_view text) {
  const char* const space = " \t\r\n";
  const size_t first = text.find_first_not_of(space);
  if (first == std::string_view::npos) return {};
  return text.substr(first, text.find_last_not_of(space) - first + 1);
}

}  // namespace

ChatTemplate chat_template_named(const std::string& name) {
  if (name.empty()) return ChatTemplate::none;
  for (const TemplateTokens& spec : kTemplates) {
    if (name == spec.name) return spec.chat_template;
  }
  throw Error("chat_template: unknown template '" + name + "'; expected none, llama3 or chatml");
}

std::string chat_template_name(ChatTemplate chat_template) { return template_of(chat_template).name; }

void check_chat_tokenizer(ChatTemplate chat_template, const Tokenizer& tokenizer) {
  const TemplateTokens& names = tokens_of(chat_template);
  for (const char* name : {names.begin_turn, names.end_header, names.end_turn}) {
    if (name) special_id(tokenizer, chat_template, name);
  }
}

std::vector<int32_t> render_chat(const std::vector<ChatMessage>& messages, ChatTemplate chat_template,
                                 const Tokenizer& tokenizer) {
  const TemplateTokens& names = tokens_of(chat_template);
  const int32_t begin_turn = special_id(tokenizer, chat_template, names.begin_turn);
  const int32_t end_turn = special_id(tokenizer, chat_template, names.end_turn);
  const bool llama3 = chat_template == ChatTemplate::llama3;
  std::vector<int32_t> ids;
  auto context = [&](int32_t id) { ids.push_back(id | kContextOnly); };
  auto context_text = [&](std::string_view text) {
    for (int32_t id : tokenizer.encode(text)) context(id);
  };
  if (llama3) context(tokenizer.bos_id());
  for (const ChatMessage& message : messages) {
    const int32_t learned_or_context = message.role == "assistant" ? 0 : kContextOnly;
    context(begin_turn);
    if (llama3) {
      context_text(message.role);
      context(special_id(tokenizer, chat_template, names.end_header));
      context_text("\n\n");
    } else {
      context_text(message.role + "\n");
    }
    const std::string_view content = llama3 ? trimmed(message.content) : std::string_view(message.content);
    for (int32_t id : tokenizer.encode(content)) ids.push_back(id | learned_or_context);
    ids.push_back(end_turn | learned_or_context);
    if (!llama3) context_text("\n");
  }
  context(tokenizer.eos_id());
  return ids;
}

}  // namespace titan
