// A dataset of shards (a folder or a glob): the files read one after the
// other in name order, each opened only when its turn comes, so a
// thousand-shard dataset costs one open file.
#include "sources.hpp"
#include "titan/error.hpp"

namespace titan::data {

namespace {

class ShardedSource final : public DocumentSource {
 public:
  ShardedSource(const std::string& name, std::vector<std::string> files,
                std::function<std::unique_ptr<DocumentSource>(const std::string&)> open)
      : name_(name), files_(std::move(files)), open_(std::move(open)) {
    current_ = open_(files_.front());  // fails at start on a bad first shard
  }

  std::string describe() const override {
    return std::to_string(files_.size()) + " shards of '" + name_ + "' (now '" + files_[index_] + "')";
  }

  void rewind() override {
    if (index_ != 0) {
      index_ = 0;
      current_ = open_(files_.front());
    } else {
      current_->rewind();
    }
  }

  std::optional<std::string> next_text() override {
    for (;;) {
      if (auto text = current_->next_text()) return text;
      if (!next_shard()) return std::nullopt;
    }
  }

  bool pretokenized() const override { return current_->pretokenized(); }
  bool marks_context_only() const override { return current_->marks_context_only(); }

  std::optional<std::vector<int32_t>> next_tokens() override {
    for (;;) {
      if (auto tokens = current_->next_tokens()) return tokens;
      if (!next_shard()) return std::nullopt;
    }
  }

  nlohmann::json cursor() const override {
    return {{"shard", index_}, {"file", files_[index_]}, {"in_shard", current_->cursor()}};
  }

  void seek(const nlohmann::json& cursor) override {
    const size_t shard = cursor.at("shard").get<size_t>();
    const std::string file = cursor.at("file").get<std::string>();
    if (shard >= files_.size() || files_[shard] != file) {
      throw Error("dataset '" + name_ + "': the checkpoint's data cursor is in shard " + std::to_string(shard) + " ('" +
                  file + "'), but the dataset's shard " + std::to_string(shard) + " is " +
                  (shard < files_.size() ? "'" + files_[shard] + "'" : std::string("missing (") +
                                                                         std::to_string(files_.size()) + " shards)") +
                  "; the shards changed since the save: restore them to resume where the run stopped");
    }
    if (shard != index_) {
      index_ = shard;
      current_ = open_(files_[index_]);
    }
    current_->seek(cursor.at("in_shard"));
  }

 private:
  bool next_shard() {
    if (index_ + 1 == files_.size()) return false;
    ++index_;
    current_ = open_(files_[index_]);
    return true;
  }

  std::string name_;
  std::vector<std::string> files_;
  std::function<std::unique_ptr<DocumentSource>(const std::string&)> open_;
  size_t index_ = 0;
  std::unique_ptr<DocumentSource> current_;
};

}  // namespace

std::unique_ptr<DocumentSource> make_sharded_source(
    const std::string& name, std::vector<std::string> files,
    std::function<std::unique_ptr<DocumentSource>(const std::string&)> open) {
  if (files.empty()) throw Error("dataset '" + name + "' has no shards");
  return std::make_unique<ShardedSource>(name, std::move(files), std::move(open));
}

}  // namespace titan::data
