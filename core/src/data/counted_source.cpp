// The cursor of a single file's (or shard's, or the built-in corpus's)
// source: how many documents it returned since its epoch began. Seeking
// rewinds and skips them, which reads at most that one file again.
#include "sources.hpp"
#include "titan/error.hpp"

namespace titan {

// A source without a cursor (one made outside open_dataset) resumes by
// replaying the stream (TokenWindowLoader::set_position).
nlohmann::json DocumentSource::cursor() const { return nullptr; }

void DocumentSource::seek(const nlohmann::json& /*cursor*/) {
  throw Error(describe() + " cannot seek to a saved cursor (a source opened outside open_dataset)");
}

namespace data {

namespace {

class CountedSource final : public DocumentSource {
 public:
  explicit CountedSource(std::unique_ptr<DocumentSource> inner) : inner_(std::move(inner)) {}

  std::string describe() const override { return inner_->describe(); }
  void rewind() override {
    inner_->rewind();
    documents_ = 0;
  }
  std::optional<std::string> next_text() override { return counting(inner_->next_text()); }
  bool pretokenized() const override { return inner_->pretokenized(); }
  std::optional<std::vector<int32_t>> next_tokens() override { return counting(inner_->next_tokens()); }
  bool marks_context_only() const override { return inner_->marks_context_only(); }

  nlohmann::json cursor() const override { return {{"documents", documents_}}; }

  void seek(const nlohmann::json& cursor) override {
    const int64_t target = cursor.at("documents").get<int64_t>();
    rewind();
    while (documents_ < target) {
      const bool got = inner_->pretokenized() ? next_tokens().has_value() : next_text().has_value();
      if (!got) {
        throw Error(describe() + " holds " + std::to_string(documents_) + " documents, but the checkpoint's data "
                    "cursor is at document " + std::to_string(target) + " of it: the file changed since the save; "
                    "restore it to resume where the run stopped");
      }
    }
  }

 private:
  template <typename T>
  std::optional<T> counting(std::optional<T> document) {
    if (document) ++documents_;
    return document;
  }

  std::unique_ptr<DocumentSource> inner_;
  int64_t documents_ = 0;
};

}  // namespace

std::unique_ptr<DocumentSource> counted(std::unique_ptr<DocumentSource> source) {
  return std::make_unique<CountedSource>(std::move(source));
}

}  // namespace data

}  // namespace titan
