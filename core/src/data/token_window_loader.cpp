// TokenWindowLoader: turns documents into one endless token stream
// ([BOS] doc [EOS] ..., the source repeating by epochs) and cuts it into
// disjoint windows of seq_len + 1; every rank reads the whole stream and keeps its rows.
#include <ATen/ATen.h>

#include <algorithm>
#include <deque>
#include <utility>

#include "sources.hpp"
#include "titan/data.hpp"
#include "titan/error.hpp"

namespace titan {

bool data::append_next_document(DocumentSource& source, const Tokenizer& tokenizer, std::vector<int32_t>& stream) {
  if (source.pretokenized()) {
    auto ids = source.next_tokens();
    if (!ids) return false;
    stream.insert(stream.end(), ids->begin(), ids->end());
    return true;
  }
  auto text = source.next_text();
  if (!text) return false;
  std::vector<int32_t> ids = tokenizer.encode(*text);
  stream.push_back(tokenizer.bos_id());
  stream.insert(stream.end(), ids.begin(), ids.end());
  stream.push_back(tokenizer.eos_id());
  return true;
}

struct TokenWindowLoader::Impl {
  std::unique_ptr<DocumentSource> source;
  std::shared_ptr<const Tokenizer> tokenizer;
  int64_t window = 0;  // seq_len + 1
  int dp_rank = 0, dp_degree = 1;

  std::vector<int32_t> pending;  // the document (or chunk) read last; its tokens from `head` are not consumed
  size_t head = 0;
  nlohmann::json pending_source;  // the source's cursor just before it read `pending` (for the loader's cursor)
  int64_t windows_consumed = 0;       // global, over all ranks
  int64_t tokens_read = 0;            // stream tokens appended to `pending` so far
  bool epoch_has_tokens = false;      // guards against spinning on an empty source
  std::vector<int64_t> epoch_starts;  // stream offset of each epoch after the first
  std::optional<DocumentBoundaries> ignored_crossings;  // labels across a document end carry no loss
  int64_t global_labels = 0;  // of the last batch, every rank's
  std::vector<int64_t> scratch;  // another rank's window, read to count its labels

  // Packing other than concat_then_split: windows of whole documents.
  Packing packing = Packing::concat_then_split;
  struct Row {
    std::vector<int64_t> tokens;
    int64_t epoch = 0;  // of its first document
  };
  std::vector<Row> open_rows;  // being filled, oldest first
  std::deque<Row> ready_rows;  // complete (full, or closed with padding), in order

  size_t available() const { return pending.size() - head; }

  // Appends the next document (or chunk of pre-tokenized ids) to `pending`,
  // rewinding the source at the end of an epoch.
  void read_document() {
    for (;;) {
      if (head == pending.size()) {  // callers read only when all is consumed
        pending.clear();
        head = 0;
      }
      size_t before = pending.size();
      nlohmann::json source_before = source->cursor();
      if (!data::append_next_document(*source, *tokenizer, pending)) {
        end_epoch();
        continue;
      }
      if (source->pretokenized()) check_ids(pending.data() + before, pending.data() + pending.size());
      size_t added = pending.size() - before;
      tokens_read += static_cast<int64_t>(added);
      if (added > 0) {
        epoch_has_tokens = true;
        pending_source = std::move(source_before);
        return;
      }
    }
  }

  void end_epoch() {
    if (!epoch_has_tokens) {
      throw Error(source->describe() + " contains no documents (a whole epoch produced no tokens)");
    }
    source->rewind();
    epoch_starts.push_back(tokens_read);
    epoch_has_tokens = false;
  }

  void check_ids(const int32_t* begin, const int32_t* end) const {
    const int64_t vocab = tokenizer->vocab_size();
    for (const int32_t* token = begin; token != end; ++token) {
      const int64_t id = token_id(*token);
      if (id < 0 || id >= vocab) {
        throw Error(source->describe() + " holds token id " + std::to_string(id) + " but the tokenizer has only " +
                    std::to_string(vocab) + " ids; the shard was made with another tokenizer");
      }
    }
  }

  void skip_tokens(int64_t count) {
    while (count > 0) {
      if (available() == 0) read_document();
      size_t n = static_cast<size_t>(std::min<int64_t>(count, static_cast<int64_t>(available())));
      head += n;
      count -= static_cast<int64_t>(n);
    }
  }

  void take_tokens(int64_t count, int64_t* out) {
    while (count > 0) {
      if (available() == 0) read_document();
      size_t n = static_cast<size_t>(std::min<int64_t>(count, static_cast<int64_t>(available())));
      std::copy(pending.begin() + static_cast<std::ptrdiff_t>(head),
                pending.begin() + static_cast<std::ptrdiff_t>(head + n), out);
      out += n;
      head += n;
      count -= static_cast<int64_t>(n);
    }
  }

  // The labels of one window (`window` tokens) that carry loss: not
  // padding, and not across a document end when those are ignored.
  int64_t labels_in(const int64_t* tokens) const {
    int64_t count = 0;
    for (int64_t i = 0; i + 1 < window; ++i) {
      count += label_carries_loss(tokens[i], tokens[i + 1], ignored_crossings ? &*ignored_crossings : nullptr);
    }
    return count;
  }

  // The next window into `out` (`window` tokens), and the epoch of its first token.
  void take_window(int64_t* out) {
    if (packing == Packing::concat_then_split) {
      take_tokens(window, out);
      return;
    }
    while (ready_rows.empty()) pack_next_document();
    std::copy(ready_rows.front().tokens.begin(), ready_rows.front().tokens.end(), out);
    ready_rows.pop_front();
  }

  // Skips `windows` windows of other ranks, counting their labels.
  void skip_windows(int64_t windows) {
    if (!ignored_crossings && packing == Packing::concat_then_split && !source->marks_context_only()) {
      skip_tokens(windows * window);
      global_labels += windows * (window - 1);
      return;
    }
    scratch.resize(static_cast<size_t>(window));
    for (int64_t i = 0; i < windows; ++i) {
      take_window(scratch.data());
      global_labels += labels_in(scratch.data());
    }
  }

  // The epoch of the stream's next token.
  int64_t epoch_at_head() const {
    const int64_t offset = tokens_read - static_cast<int64_t>(available());
    return static_cast<int64_t>(std::upper_bound(epoch_starts.begin(), epoch_starts.end(), offset) -
                                epoch_starts.begin());
  }

  // The stream's next document (it ends at EOS, or before the next BOS), or
  // its next `window` tokens when it is longer.
  std::vector<int64_t> take_document(int64_t& epoch) {
    if (available() == 0) read_document();
    epoch = epoch_at_head();
    const int64_t bos = tokenizer->bos_id(), eos = tokenizer->eos_id();
    std::vector<int64_t> document;
    for (;;) {
      while (head < pending.size()) {
        const int64_t token = pending[head], id = token_id(token);
        if (!document.empty() && id == bos) return document;
        document.push_back(token);
        ++head;
        if (id == eos || static_cast<int64_t>(document.size()) == window) return document;
      }
      read_document();  // a pre-tokenized chunk ended inside the document
    }
  }

  // Places the next document into the first open window with room (carry:
  // the one open window), closing the oldest when none has.
  void pack_next_document() {
    int64_t epoch = 0;
    std::vector<int64_t> document = take_document(epoch);
    const size_t length = document.size(), full = static_cast<size_t>(window);
    if (length == full) {
      ready_rows.push_back({std::move(document), epoch});
      return;
    }
    for (auto row = open_rows.begin(); row != open_rows.end(); ++row) {
      if (full - row->tokens.size() < length) continue;
      row->tokens.insert(row->tokens.end(), document.begin(), document.end());
      if (row->tokens.size() == full) {
        ready_rows.push_back(std::move(*row));
        open_rows.erase(row);
      }
      return;
    }
    // First-fit keeps a few windows open: more would pad less, and hold
    // more documents back from the order they came in.
    const size_t most_open = packing == Packing::carry ? 1 : 8;
    if (open_rows.size() == most_open) {
      open_rows.front().tokens.resize(full, kPaddingToken);
      ready_rows.push_back(std::move(open_rows.front()));
      open_rows.erase(open_rows.begin());
    }
    open_rows.push_back({std::move(document), epoch});
  }

  void restart() {
    source->rewind();
    pending.clear();
    head = 0;
    windows_consumed = 0;
    tokens_read = 0;
    epoch_has_tokens = false;
    epoch_starts.clear();
    open_rows.clear();
    ready_rows.clear();
  }
};

namespace {

constexpr std::pair<const char*, Packing> kPackings[] = {
    {"concat_then_split", Packing::concat_then_split}, {"carry", Packing::carry}, {"first_fit", Packing::first_fit}};

const char* packing_name(Packing packing) {
  for (const auto& [name, value] : kPackings) {
    if (value == packing) return name;
  }
  return kPackings[0].first;
}

}  // namespace

Packing packing_named(const std::string& name) {
  for (const auto& [known, value] : kPackings) {
    if (name == known) return value;
  }
  throw Error("training.packing: unknown packing '" + name + "'; expected concat_then_split, carry or first_fit");
}

TokenWindowLoader::TokenWindowLoader(std::unique_ptr<DocumentSource> source, std::shared_ptr<const Tokenizer> tokenizer,
                                     int64_t seq_len, int dp_rank, int dp_degree)
    : impl_(std::make_unique<Impl>()) {
  if (!source) throw Error("data loader: no document source given");
  if (!tokenizer) throw Error("data loader: no tokenizer given for " + source->describe());
  if (seq_len < 1) throw Error("data loader: seq_len must be at least 1, got " + std::to_string(seq_len));
  if (dp_degree < 1 || dp_rank < 0 || dp_rank >= dp_degree) {
    throw Error("data loader: data-parallel rank " + std::to_string(dp_rank) + " is not in [0, " +
                std::to_string(dp_degree) + ")");
  }
  impl_->source = std::move(source);
  impl_->tokenizer = std::move(tokenizer);
  impl_->window = seq_len + 1;
  impl_->dp_rank = dp_rank;
  impl_->dp_degree = dp_degree;
  impl_->source->rewind();
}

TokenWindowLoader::~TokenWindowLoader() = default;

at::Tensor TokenWindowLoader::next_batch(int64_t local_batch) {
  if (local_batch < 1) {
    throw Error("data loader: local batch size must be at least 1, got " + std::to_string(local_batch));
  }
  Impl& s = *impl_;
  at::Tensor batch = at::empty({local_batch, s.window}, at::TensorOptions().dtype(at::kLong));
  s.global_labels = 0;
  s.skip_windows(static_cast<int64_t>(s.dp_rank) * local_batch);
  for (int64_t row = 0; row < local_batch; ++row) s.take_window(batch.data_ptr<int64_t>() + row * s.window);
  const int64_t* mine = batch.data_ptr<int64_t>();
  for (int64_t row = 0; row < local_batch; ++row) s.global_labels += s.labels_in(mine + row * s.window);
  s.skip_windows(static_cast<int64_t>(s.dp_degree - 1 - s.dp_rank) * local_batch);
  s.windows_consumed += local_batch * s.dp_degree;
  return batch;
}

void TokenWindowLoader::set_packing(Packing packing) {
  if (impl_->windows_consumed > 0) throw Error("data loader: the packing is chosen before the first batch");
  impl_->packing = packing;
}

void TokenWindowLoader::set_documents(const DocumentOptions& documents) {
  set_packing(documents.packing);
  if (documents.ignore_crossing_labels) ignore_cross_document_labels(documents.boundaries);
}

void TokenWindowLoader::ignore_cross_document_labels(const DocumentBoundaries& boundaries) {
  impl_->ignored_crossings = boundaries;
}

int64_t TokenWindowLoader::global_labels() const { return impl_->global_labels; }

int64_t TokenWindowLoader::position() const { return impl_->windows_consumed; }

void TokenWindowLoader::set_position(int64_t windows) {
  if (windows < 0) throw Error("data loader: cannot resume at negative position " + std::to_string(windows));
  Impl& s = *impl_;
  // Forward: skip from here. Backward: replay from the start; the stream is
  // deterministic, so either way the next batches equal an uninterrupted run's.
  if (windows < s.windows_consumed) s.restart();
  s.skip_windows(windows - s.windows_consumed);
  s.windows_consumed = windows;
}

nlohmann::json TokenWindowLoader::cursor() const {
  const Impl& s = *impl_;
  // Where the source stands; while a document is partly consumed, where it
  // stood before reading it, and how far into it the stream is (a token
  // shard's chunk is a million ids: re-read on a resume, never saved).
  const bool partly_consumed = s.head < s.pending.size();
  nlohmann::json source = partly_consumed ? s.pending_source : s.source->cursor();
  if (source.is_null()) return nullptr;
  auto rows_of = [](const auto& rows) {
    nlohmann::json out = nlohmann::json::array();
    for (const Impl::Row& row : rows) out.push_back({{"tokens", row.tokens}, {"epoch", row.epoch}});
    return out;
  };
  return {{"window", s.window},
          {"packing", packing_name(s.packing)},
          {"windows", s.windows_consumed},
          {"source", std::move(source)},
          {"consumed_of_document", partly_consumed ? nlohmann::json(s.head) : nlohmann::json(nullptr)},
          {"tokens_read", s.tokens_read},
          {"epoch_starts", s.epoch_starts},
          {"epoch_has_tokens", s.epoch_has_tokens},
          {"open_rows", rows_of(s.open_rows)},
          {"ready_rows", rows_of(s.ready_rows)}};
}

void TokenWindowLoader::seek(const nlohmann::json& cursor) {
  Impl& s = *impl_;
  const int64_t window = cursor.at("window").get<int64_t>();
  const std::string packing = cursor.at("packing").get<std::string>();
  if (window != s.window || packing != packing_name(s.packing)) {
    throw Error("data loader: the checkpoint's data cursor was saved with seq_len " + std::to_string(window - 1) +
                " and packing " + packing + ", this run has seq_len " + std::to_string(s.window - 1) + " and packing " +
                packing_name(s.packing) + "; resume with the saved ones");
  }
  s.source->seek(cursor.at("source"));
  s.pending.clear();
  s.head = 0;
  const nlohmann::json& consumed = cursor.at("consumed_of_document");
  if (!consumed.is_null()) {
    s.read_document();  // the document the stream was in, read again
    const size_t head = consumed.get<size_t>();
    if (head >= s.pending.size()) {
      throw Error("data loader: the checkpoint's data cursor is " + std::to_string(head) + " tokens into a document "
                  "that now has " + std::to_string(s.pending.size()) + " (" + s.source->describe() +
                  "): the data or the tokenizer changed since the save; restore them to resume where the run stopped");
    }
    s.head = head;
  }
  s.windows_consumed = cursor.at("windows").get<int64_t>();
  s.tokens_read = cursor.at("tokens_read").get<int64_t>();
  s.epoch_starts = cursor.at("epoch_starts").get<std::vector<int64_t>>();
  s.epoch_has_tokens = cursor.at("epoch_has_tokens").get<bool>();
  auto rows_from = [](const nlohmann::json& rows, auto& out) {
    out.clear();
    for (const nlohmann::json& row : rows) {
      out.push_back({row.at("tokens").get<std::vector<int64_t>>(), row.at("epoch").get<int64_t>()});
    }
  };
  rows_from(cursor.at("open_rows"), s.open_rows);
  rows_from(cursor.at("ready_rows"), s.ready_rows);
}

int64_t TokenWindowLoader::epoch() const {
  // The epoch of the next token to consume (epochs start at 0).
  Impl& s = *impl_;
  if (s.packing != Packing::concat_then_split) {
    while (s.ready_rows.empty()) s.pack_next_document();  // the next window, made ahead
    return s.ready_rows.front().epoch;
  }
  const int64_t consumed = s.windows_consumed * s.window;
  return static_cast<int64_t>(std::upper_bound(s.epoch_starts.begin(), s.epoch_starts.end(), consumed) -
                              s.epoch_starts.begin());
}

}  // namespace titan
