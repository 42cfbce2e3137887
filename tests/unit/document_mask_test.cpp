// Block-causal attention's pieces: document positions found in loaded
// windows, document ids, the masked attention against a softmax written
// here, per-row rotary tables, and a decoder model whose forward restarts
// each document.
#include "doctest_torch.hpp"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>

#include "titan/compat.hpp"
#include "titan/data.hpp"
#include "titan/error.hpp"
#include "titan/layers.hpp"
#include "titan/model.hpp"
#include "titan/microbatch_runner.hpp"

namespace {

constexpr int64_t kBos = 100, kEos = 101;

at::Tensor longs(std::vector<std::vector<int64_t>> rows) {
  std::vector<at::Tensor> made;
  for (auto& row : rows) made.push_back(at::tensor(row, at::kLong));
  return at::stack(made);
}

// softmax(q k^T / sqrt(d)) v over the keys `visible(b, i, j)` allows.
template <typename Visible>
at::Tensor reference_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, Visible visible) {
  const int64_t batch = q.size(0), seq = q.size(2);
  at::Tensor mask = at::zeros({batch, 1, seq, seq}, at::kBool);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < seq; ++i) {
      for (int64_t j = 0; j < seq; ++j) mask[b][0][i][j] = visible(b, i, j);
    }
  }
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(3)));
  return at::matmul(at::softmax(scores.masked_fill(mask.logical_not(), -std::numeric_limits<double>::infinity()), -1), v);
}

}  // namespace

TEST_CASE("document positions restart at a row's start, at BOS and after EOS") {
  //                 BOS  a   b  EOS BOS  c  EOS  d   e
  at::Tensor tokens = longs({{kBos, 5, 6, kEos, kBos, 7, kEos, 8, 9}, {3, 4, kEos, 5, kBos, 6, 7, 8, kEos}});
  at::Tensor positions = titan::document_positions(tokens, {kBos, kEos});
  CHECK(at::equal(positions, longs({{0, 1, 2, 3, 0, 1, 2, 0, 1}, {0, 1, 2, 0, 0, 1, 2, 3, 4}})));
  CHECK(at::equal(titan::document_ids(positions), longs({{1, 1, 1, 1, 2, 2, 2, 3, 3}, {1, 1, 1, 2, 3, 3, 3, 3, 3}})));
  // No boundary: one document a row, positions 0..seq-1.
  CHECK(at::equal(titan::document_positions(longs({{5, 6, 7}}), {kBos, kEos}), longs({{0, 1, 2}})));
  CHECK_THROWS_AS(titan::document_positions(at::zeros({2, 3}, at::kInt), {kBos, kEos}), titan::Error);
}

TEST_CASE("a microbatch from windows carries inputs, labels and, for block_causal, their document positions") {
  at::Tensor windows = longs({{kBos, 5, kEos, kBos, 6}});
  titan::Microbatch causal = titan::microbatch_of(windows, at::kCPU, {});
  CHECK(at::equal(causal.inputs, longs({{kBos, 5, kEos, kBos}})));
  CHECK(at::equal(causal.labels, longs({{5, kEos, kBos, 6}})));
  CHECK_FALSE(causal.document_positions.defined());
  titan::Microbatch documents =
      titan::microbatch_of(windows, at::kCPU, {{kBos, kEos}, titan::Packing::concat_then_split, /*positions=*/true,
                                               /*ignore_crossing_labels=*/false});
  CHECK(at::equal(documents.document_positions, longs({{0, 1, 2, 0}})));
}

TEST_CASE("block-causal attention sees only earlier keys of the query's own document, with and without GQA") {
  at::manual_seed(3);
  const int64_t batch = 2, heads = 4, seq = 7, dim = 8;
  at::Tensor positions = longs({{0, 1, 2, 0, 1, 0, 1}, {0, 1, 2, 3, 4, 5, 6}});
  at::Tensor documents = titan::document_ids(positions);
  auto same_document_before = [&](int64_t b, int64_t i, int64_t j) {
    return j <= i && documents[b][i].item<int64_t>() == documents[b][j].item<int64_t>();
  };
  for (int64_t kv_heads : {heads, heads / 2}) {
    CAPTURE(kv_heads);
    at::Tensor q = at::randn({batch, heads, seq, dim}, at::kDouble);
    at::Tensor k = at::randn({batch, kv_heads, seq, dim}, at::kDouble);
    at::Tensor v = at::randn({batch, kv_heads, seq, dim}, at::kDouble);
    at::Tensor whole_k = k.repeat_interleave(heads / kv_heads, 1), whole_v = v.repeat_interleave(heads / kv_heads, 1);
    at::Tensor expected = reference_attention(q, whole_k, whole_v, same_document_before);
    at::Tensor got = titan::compat::causal_attention(q, k, v, documents);
    CHECK(at::allclose(got, expected, 1e-10, 1e-10));
    // The layer seam's core takes the same path.
    CHECK(at::allclose(titan::AttentionCore().forward(q, k, v, documents), expected, 1e-10, 1e-10));
    // Without documents: plain causal, and it differs where a row has several documents.
    at::Tensor causal = titan::compat::causal_attention(q, k, v);
    CHECK(at::allclose(causal, reference_attention(q, whole_k, whole_v, [](int64_t, int64_t i, int64_t j) {
                         return j <= i;
                       }), 1e-10, 1e-10));
    CHECK_FALSE(at::allclose(causal[0], got[0], 1e-3, 1e-3));
    CHECK(at::allclose(causal[1], got[1], 1e-10, 1e-10));  // one document: the same
  }
  // The weights a per-op checkpoint saves follow the same mask.
  at::Tensor q = at::randn({batch, heads, seq, dim}, at::kDouble);
  auto [out, weights] = titan::compat::causal_attention_with_weights(q, q, q, documents);
  CHECK(at::allclose(out, reference_attention(q, q, q, same_document_before), 1e-10, 1e-10));
  CHECK(weights[0][0][3][2].item<double>() == 0.0);  // token 3 starts document 2: it sees nothing of document 1
  CHECK(weights[0][0][3][3].item<double>() == doctest::Approx(1.0));
}

TEST_CASE("rotary tables per row rotate each row's tokens by its own positions") {
  at::manual_seed(4);
  const int64_t batch = 2, seq = 5, heads = 3, dim = 8;
  at::Tensor angles = at::rand({16, dim / 2}, at::kFloat) * 3;
  angles[0].zero_();  // position 0: no rotation, as every rotary table has
  at::Tensor cos = angles.cos(), sin = angles.sin();
  at::Tensor x = at::randn({batch, seq, heads, dim});
  at::Tensor positions = longs({{0, 1, 0, 1, 2}, {3, 4, 5, 6, 7}});
  at::Tensor rows_cos = cos.index_select(0, positions.flatten()).view({batch, seq, -1});
  at::Tensor rows_sin = sin.index_select(0, positions.flatten()).view({batch, seq, -1});
  titan::Rotary rotary;
  at::Tensor got = rotary.forward(x, rows_cos, rows_sin);
  for (int64_t b = 0; b < batch; ++b) {
    // Row by row through the shared-table path: the same numbers.
    at::Tensor table_cos = rows_cos[b], table_sin = rows_sin[b];
    CHECK(at::allclose(got[b], rotary.forward(x.narrow(0, b, 1), table_cos, table_sin)[0], 1e-6, 1e-6));
  }
  // Row 0's token 2 starts a document: rotated as position 0, i.e. not at all.
  CHECK(at::allclose(got[0][2], x[0][2], 1e-6, 1e-6));
}

TEST_CASE("labels across a document end carry no loss, and each row weighs its labels that do") {
  //                        BOS  a  EOS BOS  b   c
  at::Tensor windows = longs({{kBos, 5, kEos, kBos, 6, 7}, {5, 6, 7, 8, 9, 10}});
  titan::DocumentOptions options{{kBos, kEos}, titan::Packing::concat_then_split, /*positions=*/false,
                                 /*ignore_crossing_labels=*/true};
  titan::Microbatch batch = titan::microbatch_of(windows, at::kCPU, options, /*weight_per_label=*/0.5);
  const int64_t ignored = titan::kIgnoredLabel;
  // EOS's label (the next BOS) crosses a document end; a's label (EOS) is still its document's.
  CHECK(at::equal(batch.labels, longs({{5, kEos, ignored, 6, 7}, {6, 7, 8, 9, 10}})));
  CHECK(at::equal(batch.inputs, windows.narrow(1, 0, 5)));
  REQUIRE(batch.row_weights.size() == 2);
  CHECK(batch.row_weights[0] == 4 * 0.5);
  CHECK(batch.row_weights[1] == 5 * 0.5);
  CHECK(titan::loss_weight(batch, 1.0) == 4.5);
  CHECK(titan::loss_weight(batch, 1.0, 1, 2) == 2.5);
  // Without weights: the fallback, shared by rows.
  titan::Microbatch plain = titan::microbatch_of(windows, at::kCPU, {});
  CHECK(plain.row_weights.empty());
  CHECK(at::equal(plain.labels, windows.narrow(1, 1, 5)));
  CHECK(titan::loss_weight(plain, 0.5) == 0.5);
  CHECK(titan::loss_weight(plain, 0.5, 0, 1) == 0.25);
  CHECK_THROWS_AS(titan::loss_weight(batch, 1.0, 1, 3), titan::Error);
}

TEST_CASE("a microbatch with no label that carries loss adds 0 to the loss and to the gradients") {
  at::Tensor logits = at::randn({1, 3, 5}).requires_grad_();
  at::Tensor labels = at::full({1, 3}, titan::kIgnoredLabel, at::kLong);
  at::Tensor mean = titan::cross_entropy_loss(logits, labels);
  CHECK(std::isnan(mean.item<double>()));
  at::Tensor weighted = titan::weighted_loss(mean, 0.0);
  CHECK(weighted.item<double>() == 0.0);
  weighted.backward();
  CHECK(at::equal(logits.grad(), at::zeros_like(logits)));
  CHECK(titan::weighted_loss(at::full({}, 2.0), 0.25).item<double>() == 0.5);
}

TEST_CASE("padding is an EOS input whose label carries no loss, and a row weighs only its real labels") {
  const int64_t pad = titan::kPaddingToken, ignored = titan::kIgnoredLabel;
  //                           BOS  a  EOS  pad  pad  pad
  at::Tensor windows = longs({{kBos, 5, kEos, pad, pad, pad}});
  titan::DocumentOptions options{{kBos, kEos}, titan::Packing::first_fit, /*positions=*/true,
                                 /*ignore_crossing_labels=*/false};
  titan::Microbatch batch = titan::microbatch_of(windows, at::kCPU, options, /*weight_per_label=*/1.0);
  CHECK(at::equal(batch.inputs, longs({{kBos, 5, kEos, kEos, kEos}})));
  CHECK(at::equal(batch.labels, longs({{5, kEos, ignored, ignored, ignored}})));
  REQUIRE(batch.row_weights.size() == 1);
  CHECK(batch.row_weights[0] == 2.0);
  // Each padding token after the EOS is a document of its own.
  CHECK(at::equal(batch.document_positions, longs({{0, 1, 2, 0, 0}})));
}
