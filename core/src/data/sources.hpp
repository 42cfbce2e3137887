// Constructors of the document sources that open_dataset dispatches to, and
// the gzip-aware line reader the text formats share. Private to core/src/data.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "titan/data.hpp"
#include "titan/error.hpp"

namespace titan::data {

constexpr int64_t kStoriesPerEpoch = 20000;
constexpr uint64_t kStoriesSeed = 0x5107135;

std::unique_ptr<DocumentSource> make_stories_source(uint64_t seed, int64_t documents_per_epoch);
std::unique_ptr<DocumentSource> make_jsonl_source(const std::string& path, const std::string& text_field = "text");
// Appends the source's next document to `stream` as the token stream
// holds it: a text's ids between the tokenizer's BOS and EOS, pre-tokenized
// ids (a token shard's chunk, a rendered conversation) as they are. False at
// the end of the epoch. The loader's stream and a mixture's draws share it.
bool append_next_document(DocumentSource& source, const Tokenizer& tokenizer, std::vector<int32_t>& stream);
// `source` counting the documents it returns since its epoch began: its
// cursor, to which seek() returns by rewinding and skipping that many
// (within one file or shard).
std::unique_ptr<DocumentSource> counted(std::unique_ptr<DocumentSource> source);
// A Parquet file's string column, a row a document (null rows are skipped).
std::unique_ptr<DocumentSource> make_parquet_source(const std::string& path, const std::string& text_field);
// `files` (the shards of `name`, a folder or glob) read in order, each
// opened by `open` when its turn comes; an epoch reads all of them.
std::unique_ptr<DocumentSource> make_sharded_source(
    const std::string& name, std::vector<std::string> files,
    std::function<std::unique_ptr<DocumentSource>(const std::string&)> open);
std::unique_ptr<DocumentSource> make_chat_source(const std::string& path, ChatTemplate chat_template,
                                                 std::shared_ptr<const Tokenizer> tokenizer);
std::unique_ptr<DocumentSource> make_text_source(const std::string& path);
// *.bin / *.u16 / *.u32, memory-mapped; the format is documented in its .cpp.
std::unique_ptr<DocumentSource> make_token_shard_source(const std::string& path);

// Reads lines from a plain, gzip- or zstd-compressed file (*.zst: zstd;
// otherwise zlib, which reads plain and gzip files alike).
class LineReader {
 public:
  explicit LineReader(const std::string& path);  // throws titan::Error if it cannot be opened
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;
  // The next line without its "\n" or "\r\n"; false at the end of the file.
  bool next(std::string& line);
  void rewind();
  int64_t line_number() const { return line_number_; }  // of the line last returned, 1-based
  struct Input;  // the decompressor, defined in the .cpp so zlib.h and zstd.h stay there

 private:
  std::string path_;
  std::unique_ptr<Input> input_;
  std::string buffer_;
  size_t buffer_pos_ = 0;
  bool at_end_ = false;
  int64_t line_number_ = 0;
};

// The JSON objects of a *.jsonl(.gz/.zst) file, one a line (blank lines
// skipped), and the error for a line that is not what its format expects:
// what the JSONL text source and the chat source share.
class JsonLines {
 public:
  // `expected`: what a line should be, for errors ("a JSON object with ...").
  JsonLines(const std::string& path, std::string expected);
  // The next line's object; false at the end. A line that is not a JSON
  // object throws malformed().
  bool next(nlohmann::json& object);
  void rewind() { reader_.rewind(); }
  // "dataset 'PATH' line N: expected EXPECTED, got GOT: <the line's start>;
  // fix or remove that line".
  Error malformed(const std::string& got) const;

 private:
  std::string path_, expected_;
  LineReader reader_;
  std::string line_;
};

}  // namespace titan::data
