// *.jsonl and *.jsonl.gz: one JSON object per line with a string "text"
// field (other fields are ignored; blank lines are skipped).
#include <nlohmann/json.hpp>

#include "sources.hpp"
#include "titan/error.hpp"

namespace titan::data {

namespace {

class JsonlSource final : public DocumentSource {
 public:
  explicit JsonlSource(const std::string& path) : path_(path), reader_(path) {
    // Fail at startup, not hours later, when nothing is there to train on.
    if (!next_text()) {
      throw Error("dataset '" + path_ + "' contains no documents (no JSON lines with a \"text\" field)");
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
      auto text = record.find("text");
      if (text == record.end()) throw malformed("an object without \"text\"");
      if (!text->is_string()) throw malformed("\"text\" of type " + std::string(text->type_name()));
      return text->get<std::string>();
    }
    return std::nullopt;
  }

 private:
  Error malformed(const std::string& got) const {
    std::string excerpt = line_.substr(0, 60);
    if (line_.size() > 60) excerpt += "...";
    return Error("dataset '" + path_ + "' line " + std::to_string(reader_.line_number()) +
                 ": expected a JSON object with a string field \"text\", got " + got + ": " + excerpt +
                 "; fix or remove that line");
  }

  std::string path_;
  LineReader reader_;
  std::string line_;
};

}  // namespace

std::unique_ptr<DocumentSource> make_jsonl_source(const std::string& path) {
  return std::make_unique<JsonlSource>(path);
}

}  // namespace titan::data
