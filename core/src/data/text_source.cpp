// *.txt (and *.txt.gz): plain text, documents separated by one or more blank
// lines; the lines of a document are joined with "\n".
#include "sources.hpp"
#include "titan/error.hpp"

namespace titan::data {

namespace {

bool is_blank(const std::string& line) { return line.find_first_not_of(" \t\r\f\v") == std::string::npos; }

class TextSource final : public DocumentSource {
 public:
  explicit TextSource(const std::string& path) : path_(path), reader_(path) {
    if (!next_text()) throw Error("dataset '" + path_ + "' contains no documents (the file is empty or blank)");
    reader_.rewind();
  }

  std::string describe() const override { return "text dataset '" + path_ + "'"; }
  void rewind() override { reader_.rewind(); }

  std::optional<std::string> next_text() override {
    std::string document;
    bool started = false;
    while (reader_.next(line_)) {
      if (is_blank(line_)) {
        if (started) break;
        continue;
      }
      if (started) document.push_back('\n');
      document += line_;
      started = true;
    }
    if (!started) return std::nullopt;
    return document;
  }

 private:
  std::string path_;
  LineReader reader_;
  std::string line_;
};

}  // namespace

std::unique_ptr<DocumentSource> make_text_source(const std::string& path) { return std::make_unique<TextSource>(path); }

}  // namespace titan::data
