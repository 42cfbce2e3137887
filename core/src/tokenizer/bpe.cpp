// BPE merging of one piece. Short pieces (nearly all of them) use a flat array
// rescanned after each merge, as tiktoken does; long ones (a long run of
// spaces or symbols) use a heap so the cost stays n log n, not n^2.
#include "bpe.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <queue>

namespace titan::tokenizer {

namespace {
constexpr int32_t kNoMerge = std::numeric_limits<int32_t>::max();
constexpr size_t kShortPiece = 64;
}  // namespace

bool BpeModel::add_token(int32_t id, std::string bytes) {
  if (id < 0) return false;
  if (static_cast<size_t>(id) >= token_bytes_.size()) {
    token_bytes_.resize(static_cast<size_t>(id) + 1);
    has_bytes_.resize(static_cast<size_t>(id) + 1, false);
  }
  if (has_bytes_[static_cast<size_t>(id)]) return false;
  if (!bytes_to_id_.emplace(bytes, id).second) return false;
  token_bytes_[static_cast<size_t>(id)] = std::move(bytes);
  has_bytes_[static_cast<size_t>(id)] = true;
  return true;
}

void BpeModel::add_merge(int32_t left, int32_t right, int32_t merged, int32_t priority) {
  merges_.emplace(pair_key(left, right), Merge{priority, merged});
}

void BpeModel::add_merges_from_vocab() {
  for (size_t id = 0; id < token_bytes_.size(); ++id) {
    if (!has_bytes_[id]) continue;
    std::string_view bytes = token_bytes_[id];
    for (size_t split = 1; split < bytes.size(); ++split) {
      int32_t left = find(bytes.substr(0, split));
      if (left < 0) continue;
      int32_t right = find(bytes.substr(split));
      if (right < 0) continue;
      add_merge(left, right, static_cast<int32_t>(id), static_cast<int32_t>(id));
    }
  }
}

int BpeModel::first_missing_byte() {
  for (int b = 0; b < 256; ++b) {
    char c = static_cast<char>(b);
    int32_t id = find(std::string_view(&c, 1));
    if (id < 0) return b;
    byte_to_id_[b] = id;
  }
  return -1;
}

const std::string* BpeModel::bytes_of(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= token_bytes_.size() || !has_bytes_[static_cast<size_t>(id)]) {
    return nullptr;
  }
  return &token_bytes_[static_cast<size_t>(id)];
}

int32_t BpeModel::find(std::string_view bytes) const {
  auto it = bytes_to_id_.find(std::string(bytes));
  return it == bytes_to_id_.end() ? -1 : it->second;
}

const BpeModel::Merge* BpeModel::find_merge(int32_t left, int32_t right) const {
  auto it = merges_.find(pair_key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (piece.size() == 1) {
    out.push_back(byte_to_id_[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (whole_piece_lookup_) {
    int32_t id = find(piece);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  if (piece.size() <= kShortPiece) {
    merge_short(piece, out);
  } else {
    merge_long(piece, out);
  }
}

void BpeModel::merge_short(std::string_view piece, std::vector<int32_t>& out) const {
  std::array<int32_t, kShortPiece> ids;
  std::array<int32_t, kShortPiece> priority;  // of the pair (ids[i], ids[i + 1])
  size_t n = piece.size();
  for (size_t i = 0; i < n; ++i) ids[i] = byte_to_id_[static_cast<unsigned char>(piece[i])];
  auto pair_priority = [&](size_t i) {
    const Merge* m = find_merge(ids[i], ids[i + 1]);
    return m ? m->priority : kNoMerge;
  };
  for (size_t i = 0; i + 1 < n; ++i) priority[i] = pair_priority(i);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i) {
      if (priority[i] < priority[best]) best = i;
    }
    if (priority[best] == kNoMerge) break;
    ids[best] = find_merge(ids[best], ids[best + 1])->merged;
    for (size_t i = best + 1; i + 1 < n; ++i) {
      ids[i] = ids[i + 1];
      priority[i] = priority[i + 1];
    }
    --n;
    if (best + 1 < n) priority[best] = pair_priority(best);
    if (best > 0) priority[best - 1] = pair_priority(best - 1);
  }
  out.insert(out.end(), ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n));
}

void BpeModel::merge_long(std::string_view piece, std::vector<int32_t>& out) const {
  // Nodes are the initial byte positions; a merged node keeps its left
  // position, so (priority, position) orders candidates exactly as the
  // leftmost-lowest rescan does.
  const int32_t n = static_cast<int32_t>(piece.size());
  std::vector<int32_t> id(static_cast<size_t>(n)), next(static_cast<size_t>(n)), prev(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    id[static_cast<size_t>(i)] = byte_to_id_[static_cast<unsigned char>(piece[static_cast<size_t>(i)])];
    next[static_cast<size_t>(i)] = i + 1 < n ? i + 1 : -1;
    prev[static_cast<size_t>(i)] = i - 1;
  }
  struct Candidate {
    int32_t priority, position, left, right;
    bool operator>(const Candidate& o) const {
      return priority != o.priority ? priority > o.priority : position > o.position;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto push = [&](int32_t pos) {
    if (pos < 0) return;
    int32_t nx = next[static_cast<size_t>(pos)];
    if (nx < 0) return;
    const Merge* m = find_merge(id[static_cast<size_t>(pos)], id[static_cast<size_t>(nx)]);
    if (m) heap.push({m->priority, pos, id[static_cast<size_t>(pos)], id[static_cast<size_t>(nx)]});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  std::vector<bool> alive(static_cast<size_t>(n), true);
  while (!heap.empty()) {
    Candidate c = heap.top();
    heap.pop();
    size_t pos = static_cast<size_t>(c.position);
    // Token ids at a node only ever grow into longer tokens, so a stale
    // candidate can never match the current (left, right) again.
    if (!alive[pos] || id[pos] != c.left) continue;
    int32_t nx = next[pos];
    if (nx < 0 || id[static_cast<size_t>(nx)] != c.right) continue;
    id[pos] = find_merge(c.left, c.right)->merged;
    alive[static_cast<size_t>(nx)] = false;
    next[pos] = next[static_cast<size_t>(nx)];
    if (next[pos] >= 0) prev[static_cast<size_t>(next[pos])] = c.position;
    push(prev[pos]);
    push(c.position);
  }
  for (int32_t i = 0; i >= 0; i = next[static_cast<size_t>(i)]) out.push_back(id[static_cast<size_t>(i)]);
}

}  // namespace titan::tokenizer
