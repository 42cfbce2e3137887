// The byte-level BPE merge engine shared by the tiktoken and tokenizer.json
// tokenizers: token bytes, a (left, right) -> (priority, merged) table, and the
// merge of one pre-tokenized piece, lowest priority first, leftmost on ties.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace titan::tokenizer {

// Token ids index dense tables (here, and the model's embedding), so a
// file's ids must stay below this: far above real vocabularies (Llama 3:
// 128,256), low enough that a corrupt id costs tens of MB, not 32 GB.
constexpr int32_t kMaxVocabSize = 1 << 21;

class BpeModel {
 public:
  // Declares token `id` with its bytes. Returns false if the id or the bytes
  // are already taken (the caller reports it with file context).
  bool add_token(int32_t id, std::string bytes);
  // Declares that adjacent tokens `left`, `right` merge into `merged`;
  // lower priorities merge first. An existing pair keeps its first entry.
  void add_merge(int32_t left, int32_t right, int32_t merged, int32_t priority);
  // tiktoken's rule: any split of a token into two tokens is a merge whose
  // priority is the merged token's rank (= id).
  void add_merges_from_vocab();
  // Checks every single byte has a token. Returns the first missing byte or -1.
  int first_missing_byte();
  // tiktoken emits a piece that is itself a token directly, without merging.
  void set_whole_piece_lookup(bool on) { whole_piece_lookup_ = on; }

  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  // Bytes of a token; nullptr when the id has none (a gap or a special token).
  const std::string* bytes_of(int32_t id) const;
  int32_t find(std::string_view bytes) const;  // -1 if absent
  int32_t max_id() const { return static_cast<int32_t>(token_bytes_.size()) - 1; }
  size_t merge_count() const { return merges_.size(); }

 private:
  struct Merge {
    int32_t priority;
    int32_t merged;
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  const Merge* find_merge(int32_t left, int32_t right) const;
  void merge_short(std::string_view piece, std::vector<int32_t>& out) const;
  void merge_long(std::string_view piece, std::vector<int32_t>& out) const;

  std::vector<std::string> token_bytes_;
  std::vector<bool> has_bytes_;
  std::unordered_map<std::string, int32_t> bytes_to_id_;
  std::unordered_map<uint64_t, Merge> merges_;
  int32_t byte_to_id_[256];
  bool whole_piece_lookup_ = false;
};

}  // namespace titan::tokenizer
