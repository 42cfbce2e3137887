// *.jsonl, *.jsonl.gz and *.jsonl.zst: one JSON object per line with a
// string text field ("text" unless configured; other fields are ignored;
// blank lines are skipped).
#include <nlohmann/json.hpp>

#include "sources.hpp"
#include "titan/error.hpp"

namespace titan::data {

namespace {

class JsonlSource final : public DocumentSource {
 public:
  JsonlSource(const std::string& path, const std::string& field) : path_(path), field_(field), reader_(path) {
    // Fail at startup, not hours later, when nothing is there to train on.
    if (!next_text()) {
      throw Error("dataset '" + path_ + "' contains no documents (no JSON lines with a \"" + field_ + "\" field)");
    }
    reader_.rewind();
  }

  std::string describe() const override { return "jsonl dataset '" + path_ + "'"; }
  void rewind() override { reader_.rewind(); }

  std::optional<std::string> next_text() override {
    while (reader_.next(line_)) {
      if (line_.find_first_not_of(" \t\r") == std::string::npos) continue;
      nlohmann::json record = nlohmann::json::parse(line_, nullptr, /*allow_exceptions=*/false);
      if (record.is_discarded() || !record.is_object()) {
        throw malformed(record.is_discarded() ? "not valid JSON" : "a JSON " + std::string(record.type_name()));
      }
      auto text = record.find(field_);
      if (text == record.end()) throw malformed("an object without \"" + field_ + "\"");
      if (!text->is_string()) throw malformed("\"" + field_ + "\" of type " + std::string(text->type_name()));
      return text->get<std::string>();
    }
    return std::nullopt;
  }

 private:
  Error malformed(const std::string& got) const {
    std::string excerpt = line_.substr(0, 60);
    if (line_.size() > 60) excerpt += "...";
    return Error("dataset '" + path_ + "' line " + std::to_string(reader_.line_number()) +
                 ": expected a JSON object with a string field \"" + field_ + "\", got " + got + ": " + excerpt +
                 "; fix or remove that line");
  }

  std::string path_;
  std::string field_;
  LineReader reader_;
  std::string line_;
};

}  // namespace

std::unique_ptr<DocumentSource> make_jsonl_source(const std::string& path, const std::string& text_field) {
  return std::make_unique<JsonlSource>(path, text_field);
}

}  // namespace titan::data
