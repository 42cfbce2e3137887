// *.parquet: a row's string in the text column is a document (null rows are
// skipped), read through ParquetTextReader (Arrow's Parquet reader).
#include "parquet_reader.hpp"
#include "sources.hpp"
#include "titan/error.hpp"

namespace titan::data {

namespace {

class ParquetSource final : public DocumentSource {
 public:
  ParquetSource(const std::string& path, const std::string& column) : path_(path), reader_(path, column) {
    std::string text;
    // Fail at startup, not hours later, when nothing is there to train on.
    if (!reader_.next(text)) {
      throw Error("dataset '" + path + "' contains no documents (no rows with a '" + column + "')");
    }
    reader_.rewind();
  }

  std::string describe() const override { return "Parquet dataset '" + path_ + "'"; }
  void rewind() override { reader_.rewind(); }
  std::optional<std::string> next_text() override {
    std::string text;
    if (!reader_.next(text)) return std::nullopt;
    return text;
  }

 private:
  std::string path_;
  ParquetTextReader reader_;
};

}  // namespace

std::unique_ptr<DocumentSource> make_parquet_source(const std::string& path, const std::string& text_field) {
  return std::make_unique<ParquetSource>(path, text_field);
}

}  // namespace titan::data
