// Training data: document sources, and a loader that packs
// [BOS] doc [EOS] streams into disjoint windows of seq_len + 1 tokens and
// shards them over data-parallel ranks. Its state is one global window
// count, so a run may resume on another data-parallel degree.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include "titan/microbatch_runner.hpp"
#include "titan/tokenizer.hpp"

namespace titan {

// A finite, re-iterable sequence of documents (epochs repeat it).
class DocumentSource {
 public:
  virtual ~DocumentSource() = default;
  virtual std::string describe() const = 0;
  virtual void rewind() = 0;
  // Next document's text; none at the end of the epoch.
  virtual std::optional<std::string> next_text() = 0;
  // Sources of pre-tokenized ids return them here instead of text; the
  // loader takes them as the stream itself (no BOS/EOS added).
  virtual bool pretokenized() const { return false; }
  virtual std::optional<std::vector<int32_t>> next_tokens() { return std::nullopt; }
  // Whether next_tokens() marks tokens kContextOnly (rendered conversations).
  virtual bool marks_context_only() const { return false; }
  // Where the source stands (the documents it returned since the epoch
  // began; a shard and a row in it; a mixture's draws), and going back
  // there on a resume without reading what came before. Every source
  // open_dataset and open_mixture return has one; null: none.
  virtual nlohmann::json cursor() const;
  virtual void seek(const nlohmann::json& cursor);
};

// The built-in corpus: deterministic generated English stories.
std::string generate_story(uint64_t seed, int64_t index);

// Where documents begin in a token stream: at a BOS token and after an EOS
// token (a stream of text sources is [BOS] doc [EOS] ...; pre-tokenized
// shards separate documents by either).
struct DocumentBoundaries {
  int64_t bos_id = -1;
  int64_t eos_id = -1;
};

// The label of a document's last token is the next document's first (the
// stream's token after `token` is `next`): it crosses a document end.
inline bool label_crosses_document(int64_t token, int64_t next, const DocumentBoundaries& boundaries) {
  return token == boundaries.eos_id || next == boundaries.bos_id;
}

// PyTorch's ignore_index: a label that carries no loss.
constexpr int64_t kIgnoredLabel = -100;
// What fills a packed window after its last document (training.packing);
// microbatch_of makes it an EOS input whose label carries no loss.
constexpr int64_t kPaddingToken = -1;

// A token of a rendered conversation that is context only (an SFT prompt,
// a chat header) carries this bit in the stream: it is an input like any
// other, but as a label it carries no loss. microbatch_of clears it.
// Vocabularies are far below 2^30 ids (the tokenizers refuse larger).
constexpr int32_t kContextOnly = 1 << 30;
// A stream token's id: without the context-only bit (padding stays -1).
inline int64_t token_id(int64_t token) { return token < 0 ? token : token & ~int64_t{kContextOnly}; }

// Whether the label `next` of the input `token` carries loss: it is not
// padding, nor context only, nor, when `ignored_crossings` is given, across
// a document end. The one rule the loader counts by and microbatch_of
// masks by.
inline bool label_carries_loss(int64_t token, int64_t next, const DocumentBoundaries* ignored_crossings) {
  return next != kPaddingToken && (next & kContextOnly) == 0 &&
         !(ignored_crossings && label_crosses_document(token_id(token), token_id(next), *ignored_crossings));
}

// Supervised fine-tuning: conversations rendered with a chat template.
struct ChatMessage {
  std::string role;  // system, user, assistant (or any other the data uses)
  std::string content;
};
//   llama3: [BOS] then per message <|start_header_id|>ROLE<|end_header_id|>
//           "\n\n" CONTENT (trimmed) <|eot_id|>, as Llama 3 Instruct's template;
//   chatml: per message <|im_start|>ROLE "\n" CONTENT <|im_end|> "\n", as Qwen's.
// Then the tokenizer's EOS, which ends the document. Only each assistant
// message's content and its end-of-turn token carry loss; every other token
// is kContextOnly. Text between special tokens is encoded piece by piece
// (the role, the separator, the content): the same ids as encoding the
// rendered string whole unless a content begins with whitespace (chatml).
enum class ChatTemplate { none, llama3, chatml };
ChatTemplate chat_template_named(const std::string& name);  // none, llama3, chatml; throws otherwise
std::string chat_template_name(ChatTemplate chat_template);
// Throws, naming the template and the token, when `tokenizer` lacks a
// special token the template is written in.
void check_chat_tokenizer(ChatTemplate chat_template, const Tokenizer& tokenizer);
std::vector<int32_t> render_chat(const std::vector<ChatMessage>& messages, ChatTemplate chat_template,
                                 const Tokenizer& tokenizer);

// How a dataset file is read.
struct SourceOptions {
  // Not none: each JSON line is a conversation {"messages": [{"role",
  // "content"}, ...]} rendered with this template (needs `tokenizer`).
  ChatTemplate chat_template = ChatTemplate::none;
  std::shared_ptr<const Tokenizer> tokenizer;
  std::string text_field = "text";  // the documents' field (JSONL) or column (Parquet)
};

// "stories" (the built-in generated corpus), or a file, a folder of shards
// or a glob (shards read in name order): *.jsonl, *.jsonl.gz, *.jsonl.zst
// ({"text": ...} per line, or conversations with a chat template),
// *.parquet (a string column), *.txt(.gz/.zst) (documents separated by
// blank lines), *.bin / *.u16 / *.u32 (pre-tokenized, memory-mapped).
std::unique_ptr<DocumentSource> open_dataset(const std::string& name_or_path, const SourceOptions& options = {});

// One source of a mixture (an element of training.datasets).
struct DatasetEntry {
  std::string path;     // a file, a folder of shards or a glob
  double weight = 1.0;  // relative: each document's source is drawn with probability weight / sum
  std::string text_field = "text";
  ChatTemplate chat_template = ChatTemplate::none;
};
// The entries as one source: one entry is that source itself; several are
// a mixture drawn by weight, seeded by `seed` (the same stream on every
// rank and after a resume), whose documents are token ids ([BOS] text
// [EOS], or a rendered conversation). Pre-tokenized shards are refused in
// a mixture (their chunks are not documents).
std::unique_ptr<DocumentSource> open_mixture(const std::vector<DatasetEntry>& entries, uint64_t seed,
                                             std::shared_ptr<const Tokenizer> tokenizer);

// How documents become windows (training.packing):
//   concat_then_split: one stream [BOS] doc [EOS] ... cut every seq_len + 1
//     tokens; a document at a window's end continues in the next;
//   carry: windows filled in order with whole documents; one that does not
//     fit what is left of a window starts the next (the rest is padding);
//   first_fit: whole documents into the first of several open windows with
//     room (fewer padded tokens than carry).
// A document longer than a window is cut into window-sized pieces in every
// mode.
enum class Packing { concat_then_split, carry, first_fit };
Packing packing_named(const std::string& name);  // throws on an unknown name

struct DocumentOptions;

class TokenWindowLoader {
 public:
  TokenWindowLoader(std::unique_ptr<DocumentSource> source, std::shared_ptr<const Tokenizer> tokenizer,
                    int64_t seq_len, int dp_rank = 0, int dp_degree = 1);
  ~TokenWindowLoader();
  // This rank's next `local_batch` windows: int64 [local_batch, seq_len + 1].
  // Globally one call consumes local_batch * dp_degree windows; rank r gets
  // windows [pos + r * local_batch, pos + (r + 1) * local_batch).
  at::Tensor next_batch(int64_t local_batch);
  // From now on the labels that cross a document end carry no loss: the
  // count of global_labels() leaves them out.
  void ignore_cross_document_labels(const DocumentBoundaries& boundaries);
  // Before the first batch: how documents become windows (documents begin
  // at the tokenizer's BOS and after its EOS).
  void set_packing(Packing packing);
  // Both of the above from a microbatch's options (the trainer's and the
  // validator's loaders are set up alike).
  void set_documents(const DocumentOptions& documents);
  // The labels that carry loss in the last next_batch() of every
  // data-parallel rank (each rank reads the whole stream: no communication).
  int64_t global_labels() const;
  int64_t position() const;  // global windows consumed so far
  void set_position(int64_t windows);  // to resume by replaying the stream from its start
  // Everything the next windows depend on: the position, the source's
  // cursor, the tokens read but not yet in a window, the packer's open
  // windows. The same on every data-parallel rank (each reads the whole
  // stream), so a run resumes from it on any data-parallel degree, reading
  // nothing before it. Null when the source has no cursor.
  nlohmann::json cursor() const;
  void seek(const nlohmann::json& cursor);  // throws, naming what differs, on a cursor of another setup
  int64_t epoch() const;  // passes over the source before the next window's first token

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};


// Each token's position within its document ([batch, seq] int64): 0 at the
// row's first token (a window may start inside a document; its positions
// count from there) and at each document start, else one more than the
// token before.
at::Tensor document_positions(const at::Tensor& inputs, const DocumentBoundaries& boundaries);

// What a microbatch takes of the documents in its windows.
struct DocumentOptions {
  DocumentBoundaries boundaries;
  Packing packing = Packing::concat_then_split;  // the loader's (TokenWindowLoader::set_packing)
  bool positions = false;               // model.attn_mask_type: block_causal
  bool ignore_crossing_labels = false;  // training.ignore_cross_document_labels
  bool context_only_tokens = false;     // the stream marks prompts kContextOnly (training.chat_template)
};

// A microbatch from loaded windows [batch, seq + 1] (host memory): inputs
// and labels moved to `device` (padding an EOS input whose label, like the
// labels across a document end when asked, is kIgnoredLabel), the inputs' document positions for
// block-causal attention, found on the host, and each row's loss weight:
// its labels that carry loss x `weight_per_label` (the data-parallel
// degree / the global batch's labels that carry loss; 0: none).
Microbatch microbatch_of(const at::Tensor& windows, const c10::Device& device, const DocumentOptions& documents,
                         double weight_per_label = 0);

}  // namespace titan
