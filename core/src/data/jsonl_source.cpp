// *.jsonl, *.jsonl.gz and *.jsonl.zst: one JSON object per line with a
// string text field ("text" unless configured; other fields are ignored;
// blank lines are skipped). JsonLines reads them, for the chat source too.
#include <nlohmann/json.hpp>

#include "sources.hpp"
#include "titan/error.hpp"

namespace titan::data {

JsonLines::JsonLines(const std::string& path, std::string expected)
    : path_(path), expected_(std::move(expected)), reader_(path) {}

bool JsonLines::next(nlohmann::json& object) {
  while (reader_.next(line_)) {
    if (line_.find_first_not_of(" \t\r") == std::string::npos) continue;
    object = nlohmann::json::parse(line_, nullptr, /*allow_exceptions=*/false);
    if (object.is_discarded()) throw malformed("not valid JSON");
    if (!object.is_object()) throw malformed("a JSON " + std::string(object.type_name()));
    return true;
  }
  return false;
}

Error JsonLines::malformed(const std::string& got) const {
  std::string excerpt = line_.substr(0, 60);
  if (line_.size() > 60) excerpt += "...";
  return Error("dataset '" + path_ + "' line " + std::to_string(reader_.line_number()) + ": expected " + expected_ +
               ", got " + got + ": " + excerpt + "; fix or remove that line");
}

namespace {

class JsonlSource final : public DocumentSource {
 public:
  JsonlSource(const std::string& path, const std::string& field)
      : path_(path), field_(field), lines_(path, "a JSON object with a string field \"" + field + "\"") {
    // Fail at startup, not hours later, when nothing is there to train on.
    if (!next_text()) {
      throw Error("dataset '" + path_ + "' contains no documents (no JSON lines with a \"" + field_ + "\" field)");
    }
    lines_.rewind();
  }

  std::string describe() const override { return "jsonl dataset '" + path_ + "'"; }
  void rewind() override { lines_.rewind(); }

  std::optional<std::string> next_text() override {
    if (!lines_.next(record_)) return std::nullopt;
    auto text = record_.find(field_);
    if (text == record_.end()) throw lines_.malformed("an object without \"" + field_ + "\"");
    if (!text->is_string()) throw lines_.malformed("\"" + field_ + "\" of type " + std::string(text->type_name()));
    return text->get<std::string>();
  }

 private:
  std::string path_;
  std::string field_;
  JsonLines lines_;
  nlohmann::json record_;
};

}  // namespace

std::unique_ptr<DocumentSource> make_jsonl_source(const std::string& path, const std::string& text_field) {
  return std::make_unique<JsonlSource>(path, text_field);
}

}  // namespace titan::data
