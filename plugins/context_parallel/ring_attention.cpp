// Ring attention's forward (block by block, log-sum-exp merge) and its
// written-out backward, over all-gathered or ring-passed K/V blocks.
#include "ring_attention.h"

#include <torch/csrc/autograd/custom_function.h>

#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "titan/error.hpp"
#include "titan/host_to_device.hpp"

namespace titan::context_parallel {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Tags keep the K/V stream and the gradient stream between two ranks apart.
constexpr int kBlockTag = 1;
constexpr int kGradientTag = 2;

// Query head i reads key/value head i / (heads / kv_heads) (grouped-query).
at::Tensor expand_heads(const at::Tensor& kv, int64_t heads) {
  return kv.size(1) == heads ? kv : kv.repeat_interleave(heads / kv.size(1), 1);
}

// The gradient of expanded heads summed back onto each key/value head.
at::Tensor fold_heads(const at::Tensor& grad, int64_t kv_heads) {
  const int64_t heads = grad.size(1);
  if (heads == kv_heads) return grad;
  return grad.view({grad.size(0), kv_heads, heads / kv_heads, grad.size(2), grad.size(3)}).sum(2);
}

// `mask` undefined: every key is visible.
at::Tensor masked_scores(const at::Tensor& q, const at::Tensor& k, const at::Tensor& mask, double scale) {
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1)).mul_(scale);
  if (!mask.defined()) return scores;
  return scores.masked_fill_(mask.logical_not(), -std::numeric_limits<double>::infinity());
}

// A run of local rows holding consecutive positions: a chunk of the
// sequence. Head-tail balancing gives each rank two.
struct Segment {
  int64_t begin = 0, length = 0;
};

std::vector<Segment> segments_of(const at::Tensor& positions) {
  std::vector<Segment> segments;
  auto at = positions.accessor<int64_t, 1>();
  for (int64_t i = 0; i < positions.size(0); ++i) {
    if (segments.empty() || at[i] != at[i - 1] + 1) segments.push_back({i, 0});
    ++segments.back().length;
  }
  return segments;
}

// Which of a chunk's keys each query of another chunk is in the same
// document as: [batch, 1, queries, keys], from the whole sequence's
// documents ([batch, seq] on the device) at the chunks' global positions.
at::Tensor same_document(const at::Tensor& documents, const at::Tensor& query_positions, const Segment& queries,
                         const at::Tensor& key_positions, const Segment& keys) {
  auto at_positions = [&](const at::Tensor& positions, const Segment& segment) {
    return documents.index_select(1, host_to_device(positions.narrow(0, segment.begin, segment.length), documents.device()));
  };
  return at_positions(query_positions, queries).unsqueeze(2).eq(at_positions(key_positions, keys).unsqueeze(1)).unsqueeze(1);
}

// The mask between two chunks ([queries, keys] causal, or [batch, 1,
// queries, keys] with documents), or undefined when every key is visible;
// nullopt when no query sees any key (the pair is skipped, which is what
// head-tail balancing evens out).
std::optional<at::Tensor> pair_mask(const at::Tensor& query_positions, const Segment& queries,
                                    const at::Tensor& key_positions, const Segment& keys, const at::Tensor& documents,
                                    const c10::Device& device) {
  // Positions run consecutively within a segment, so its corners decide the
  // common cases without building the [queries x keys] mask (at 262k
  // tokens, 64 MiB per pair, dozens of pairs per layer): the last query
  // before the first key sees nothing, the first query at or after the last
  // key sees everything.
  // The positions are the layout's host tensors (as segments_of reads
  // them): the corners are read in place, never from the device.
  auto query = query_positions.accessor<int64_t, 1>(), key = key_positions.accessor<int64_t, 1>();
  const int64_t last_query = queries.begin + queries.length - 1, last_key = keys.begin + keys.length - 1;
  const PairVisibility visibility =
      pair_visibility(query[queries.begin], query[last_query], key[keys.begin], key[last_key]);
  if (visibility == PairVisibility::none) return std::nullopt;
  if (device.is_meta()) {  // the dry run: a mask's shape, no values to compute
    if (documents.defined()) {
      return at::empty({documents.size(0), 1, queries.length, keys.length},
                       at::TensorOptions().dtype(at::kBool).device(device));
    }
    if (visibility == PairVisibility::all) return at::Tensor();
    return at::empty({queries.length, keys.length}, at::TensorOptions().dtype(at::kBool).device(device));
  }
  at::Tensor mask;
  if (visibility == PairVisibility::partial) {
    mask = host_to_device(causally_visible(query_positions.narrow(0, queries.begin, queries.length),
                                           key_positions.narrow(0, keys.begin, keys.length)),
                          device);
  }
  if (!documents.defined()) return mask;
  at::Tensor documents_agree = same_document(documents, query_positions, queries, key_positions, keys);
  // bitwise_and: logical_and has no meta kernel (titan plan's dry run).
  return mask.defined() ? documents_agree.bitwise_and(mask) : documents_agree;
}

// This rank's queries: the whole sequence's length, their positions and
// chunks, and which chunk pairs of a rank's K/V block they see. Forward and
// backward walk the same pairs.
struct QueryChunks {
  const RingSetup& setup;
  int64_t seq;
  at::Tensor positions;
  std::vector<Segment> segments;
  at::Tensor documents;  // of the whole sequence; undefined: causal
  c10::Device device;

  // `whole_documents` empty: causal (autograd's apply takes no undefined tensor).
  QueryChunks(const RingSetup& ring, const at::Tensor& q, int rank, const at::Tensor& whole_documents)
      : setup(ring),
        seq(q.size(2) * ring.comm->size()),
        positions(ring.layout.positions(seq, rank)),
        segments(segments_of(positions)),
        documents(whole_documents.numel() > 0 ? whole_documents : at::Tensor()),
        device(q.device()) {}

  // visit(i, rows, columns, mask) for every pair (query chunk i, a chunk of
  // `owner`'s block) some query sees; mask undefined when all see all.
  template <typename Visit>
  void for_each_visible_pair(int owner, Visit visit) const {
    at::Tensor key_positions = setup.layout.positions(seq, owner);
    const std::vector<Segment> key_segments = segments_of(key_positions);
    for (size_t i = 0; i < segments.size(); ++i) {
      for (const Segment& columns : key_segments) {
        auto mask = pair_mask(positions, segments[i], key_positions, columns, documents, device);
        if (mask) visit(i, segments[i], columns, *mask);
      }
    }
  }
};

double scale_of(const at::Tensor& q) { return 1.0 / std::sqrt(static_cast<double>(q.size(3))); }

// x, with 0 where x is -inf (a query row that sees no key of the block).
at::Tensor finite_or_zero(const at::Tensor& x) { return at::where(at::isneginf(x), at::zeros_like(x), x); }

// The attention output so far and the log-sum-exp of the scores behind it
// ([batch, heads, queries, head_dim] and [batch, heads, queries]).
struct Partial {
  at::Tensor out;
  at::Tensor lse;
};

void attend(Partial& acc, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
            double scale) {
  at::Tensor scores = masked_scores(q, k, mask, scale);
  at::Tensor row_max = finite_or_zero(std::get<0>(scores.max(-1, /*keepdim=*/true)));
  at::Tensor weights = scores.sub_(row_max).exp_();
  at::Tensor total = weights.sum(-1, /*keepdim=*/true);
  at::Tensor out = at::matmul(weights, v).div_(total.masked_fill(total == 0, 1));
  at::Tensor lse = (row_max + total.log()).squeeze(-1);
  if (!acc.out.defined()) {
    acc = {out, lse};
    return;
  }
  at::Tensor merged = at::logaddexp(acc.lse, lse);
  at::Tensor base = finite_or_zero(merged);
  acc.out = acc.out * (acc.lse - base).exp().unsqueeze(-1) + out * (lse - base).exp().unsqueeze(-1);
  acc.lse = merged;
}

// This block's share of dq (added to grad_q) and its [dk, dv] on kv heads,
// from the final log-sum-exp (flash attention's backward, one block).
at::Tensor block_gradients(const at::Tensor& q, const at::Tensor& kv, const at::Tensor& mask, double scale,
                           const at::Tensor& grad_out, const at::Tensor& lse, const at::Tensor& delta,
                           at::Tensor& grad_q) {
  const int64_t heads = q.size(1), kv_heads = kv.size(2);
  at::Tensor k = expand_heads(kv[0], heads), v = expand_heads(kv[1], heads);
  at::Tensor probs = masked_scores(q, k, mask, scale).sub_(lse.unsqueeze(-1)).exp_();
  at::Tensor grad_v = at::matmul(probs.transpose(-2, -1), grad_out);
  at::Tensor grad_scores = probs.mul_(at::matmul(grad_out, v.transpose(-2, -1)).sub_(delta.unsqueeze(-1)));
  grad_q.add_(at::matmul(grad_scores, k), scale);
  at::Tensor grad_k = at::matmul(grad_scores.transpose(-2, -1), q).mul_(scale);
  return at::stack({fold_heads(grad_k, kv_heads), fold_heads(grad_v, kv_heads)});
}

// Every rank's [2, ...] K/V block: [ranks, 2, ...].
at::Tensor gather_blocks(Comm& comm, const at::Tensor& kv) {
  std::vector<int64_t> shape = kv.sizes().vec();
  shape.insert(shape.begin(), comm.size());
  return comm.all_gather(kv).view(shape);
}

// Sends `outgoing` to the next rank of the ring while the previous rank's
// arrives; wait() on both before reading the result.
struct RingExchange {
  std::unique_ptr<CommWork> sent, received;
  at::Tensor incoming;

  RingExchange(Comm& comm, const at::Tensor& outgoing, int tag) : incoming(at::empty_like(outgoing)) {
    const int ranks = comm.size(), rank = comm.rank();
    sent = comm.send_async(outgoing, (rank + 1) % ranks, tag);
    received = comm.recv_async(incoming, (rank + ranks - 1) % ranks, tag);
  }
  at::Tensor finish() {
    sent->wait();
    received->wait();
    return incoming;
  }
};

const RingSetup& setup_of(int64_t handle) { return *reinterpret_cast<const RingSetup*>(handle); }

struct RingAttentionFunction : torch::autograd::Function<RingAttentionFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q_in, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& documents, int64_t handle) {
    const RingSetup& setup = setup_of(handle);
    Comm& comm = *setup.comm;
    CallSite site("context_parallel ring attention");
    const at::ScalarType work = q_in.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
    at::Tensor q = q_in.to(work);
    at::Tensor kv = at::stack({k, v}).to(work).contiguous();
    const int ranks = comm.size(), rank = comm.rank();
    const double scale = scale_of(q);
    // Chunk by chunk: a pair of chunks wholly in the queries' future costs nothing.
    const QueryChunks queries(setup, q, rank, documents);
    std::vector<Partial> acc(queries.segments.size());
    auto attend_block = [&](int owner, const at::Tensor& block) {
      const int64_t heads = q.size(1);
      at::Tensor keys = expand_heads(block[0], heads), values = expand_heads(block[1], heads);
      queries.for_each_visible_pair(owner, [&](size_t i, const Segment& rows, const Segment& columns,
                                               const at::Tensor& mask) {
        attend(acc[i], q.narrow(2, rows.begin, rows.length), keys.narrow(2, columns.begin, columns.length),
               values.narrow(2, columns.begin, columns.length), mask, scale);
      });
    };
    if (!setup.point_to_point) {
      at::Tensor blocks = gather_blocks(comm, kv);
      for (int owner = 0; owner < ranks; ++owner) attend_block(owner, blocks[owner]);
    } else {
      at::Tensor current = kv;
      for (int step = 0; step < ranks; ++step) {
        // The next block travels while this one is computed on.
        std::unique_ptr<RingExchange> exchange;
        if (step + 1 < ranks) exchange = std::make_unique<RingExchange>(comm, current, kBlockTag);
        attend_block((rank - step + ranks) % ranks, current);
        if (exchange) current = exchange->finish();
      }
    }
    ctx->saved_data["setup"] = handle;
    ctx->saved_data["q_dtype"] = static_cast<int64_t>(q_in.scalar_type());
    ctx->saved_data["kv_dtype"] = static_cast<int64_t>(k.scalar_type());
    std::vector<at::Tensor> outs, lses;
    for (const Partial& part : acc) {
      outs.push_back(part.out);
      lses.push_back(part.lse);
    }
    at::Tensor out = at::cat(outs, 2), lse = at::cat(lses, 2);
    ctx->save_for_backward({q, kv, out, lse, documents});
    return out.to(q_in.scalar_type());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const RingSetup& setup = setup_of(ctx->saved_data["setup"].toInt());
    Comm& comm = *setup.comm;
    CallSite site("context_parallel ring attention (backward)");
    variable_list saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &kv = saved[1], &out = saved[2], &lse = saved[3];
    at::Tensor grad_out = grads[0].to(q.scalar_type());
    at::Tensor delta = (grad_out * out).sum(-1);
    at::Tensor grad_q = at::zeros_like(q);
    const int ranks = comm.size(), rank = comm.rank();
    const double scale = scale_of(q);
    const QueryChunks queries(setup, q, rank, saved[4]);
    auto gradients_of = [&](int owner, const at::Tensor& block, at::Tensor& grad_block) {
      queries.for_each_visible_pair(owner, [&](size_t, const Segment& rows, const Segment& columns,
                                               const at::Tensor& mask) {
        auto narrow_rows = [&](const at::Tensor& x) { return x.narrow(2, rows.begin, rows.length); };
        at::Tensor grad_q_rows = narrow_rows(grad_q);  // a view: filled in place
        grad_block.narrow(3, columns.begin, columns.length)
            .add_(block_gradients(narrow_rows(q), block.narrow(3, columns.begin, columns.length), mask, scale,
                                  narrow_rows(grad_out), narrow_rows(lse), narrow_rows(delta), grad_q_rows));
      });
    };

    at::Tensor grad_kv;
    if (!setup.point_to_point) {
      // K/V gathered again rather than kept from forward: memory over time.
      at::Tensor blocks = gather_blocks(comm, kv);
      at::Tensor grad_blocks = at::zeros_like(blocks);
      for (int owner = 0; owner < ranks; ++owner) {
        at::Tensor grad_block = grad_blocks[owner];
        gradients_of(owner, blocks[owner], grad_block);
      }
      grad_kv = comm.reduce_scatter(grad_blocks.flatten(0, 1), ReduceOp::sum);
    } else {
      // Each block's gradient travels with it and is home after `ranks` hops.
      at::Tensor current = kv;
      at::Tensor current_grad = at::zeros_like(kv);
      for (int step = 0; step < ranks; ++step) {
        std::unique_ptr<RingExchange> next_block;
        if (step + 1 < ranks) next_block = std::make_unique<RingExchange>(comm, current, kBlockTag);
        gradients_of((rank - step + ranks) % ranks, current, current_grad);
        current_grad = RingExchange(comm, current_grad, kGradientTag).finish();
        if (next_block) current = next_block->finish();
      }
      grad_kv = current_grad;
    }
    auto q_dtype = static_cast<at::ScalarType>(ctx->saved_data["q_dtype"].toInt());
    auto kv_dtype = static_cast<at::ScalarType>(ctx->saved_data["kv_dtype"].toInt());
    return {grad_q.to(q_dtype), grad_kv[0].to(kv_dtype), grad_kv[1].to(kv_dtype), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor RingAttention::forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& documents) {
  if (k.size(1) == 0 || q.size(1) % k.size(1) != 0) {
    throw Error("context_parallel: " + std::to_string(q.size(1)) + " query heads do not group over " +
                std::to_string(k.size(1)) + " key/value heads");
  }
  const at::Tensor causal = at::empty({0}, q.options().dtype(at::kLong));
  return RingAttentionFunction::apply(q, k, v, documents.defined() ? documents : causal,
                                      reinterpret_cast<int64_t>(setup_.get()));
}

}  // namespace titan::context_parallel
