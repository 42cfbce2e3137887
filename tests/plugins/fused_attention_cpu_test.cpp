// The CPU causal-attention kernel (plugins/fused_kernels/cpu_attention.h)
// equals ATen's scaled_dot_product_attention(is_causal) in fp32 within 1e-5
// of each tensor's largest magnitude, forward and backward (dq, dk, dv
// against autograd), at the Llama debug shape, odd sequence lengths, head
// dims 8 / 16 / 20 / 24 / 64 / 128, grouped-query heads, transposed
// (non-contiguous) inputs and batch 1, and with block-causal documents;
// CpuAttention takes ATen's path for meta and bf16 tensors and where ATen
// was measured faster. On a CPU with
// AVX-512 the head_dim 16/64/128 shapes run the kernel's 16-lane path and
// head_dim 8/20/24 its AVX2 path.
#include <algorithm>
#include <string>

#include "cpu_attention.h"
#include "doctest_torch.hpp"
#include "titan/compat.hpp"
#include "titan/error.hpp"
#include "titan/layers.hpp"

namespace {

namespace fused = titan::fused;

// Kernel and ATen differ only in fp32 rounding (exp polynomial, summation
// order, exact vs online softmax): 1e-5 of the reference's largest value,
// plus 1e-6 absolute for gradients that are zero up to rounding (one token:
// the softmax is constant, ATen's dq/dk are ~1e-7 of noise, ours exact 0).
constexpr double kRelativeToMax = 1e-5, kAbsoluteFloor = 1e-6;
double worst_relative_seen = 0;

void check_close(const at::Tensor& actual, const at::Tensor& expected, const std::string& what) {
  INFO(what);
  REQUIRE(actual.sizes() == expected.sizes());
  at::Tensor a = actual.to(at::kDouble), e = expected.to(at::kDouble);
  const double worst = (a - e).abs().max().item<double>(), scale = e.abs().max().item<double>();
  INFO("max abs error " << worst << ", reference max abs " << scale);
  CHECK(std::isfinite(worst));
  CHECK(worst <= kRelativeToMax * scale + kAbsoluteFloor);
  if (scale > 1e-3) worst_relative_seen = std::max(worst_relative_seen, worst / scale);
}

struct Shape {
  int64_t batch, heads, kv_heads, seq, head_dim;
  bool transposed;  // q/k/v as the llama3 model passes them: [b, s, h, d]
                    // storage viewed as [b, h, s, d]
};

std::string name_of(const Shape& s) {
  return "b" + std::to_string(s.batch) + " h" + std::to_string(s.heads) + " kvh" + std::to_string(s.kv_heads) + " s" +
         std::to_string(s.seq) + " d" + std::to_string(s.head_dim) + (s.transposed ? " transposed" : "");
}

at::Tensor make(const Shape& s, int64_t heads) {
  if (s.transposed) return at::randn({s.batch, s.seq, heads, s.head_dim}).transpose(1, 2);
  return at::randn({s.batch, heads, s.seq, s.head_dim});
}

void check_against_aten(const Shape& s) {
  const std::string name = name_of(s);
  at::manual_seed(s.seq * 131 + s.head_dim * 7 + s.heads);
  at::Tensor q = make(s, s.heads), k = make(s, s.kv_heads), v = make(s, s.kv_heads);
  REQUIRE(q.is_contiguous() != s.transposed);
  at::Tensor grad_out = at::randn({s.batch, s.heads, s.seq, s.head_dim});

  at::Tensor q_ref = q.detach().requires_grad_(), k_ref = k.detach().requires_grad_(),
             v_ref = v.detach().requires_grad_();
  at::Tensor out_ref = at::scaled_dot_product_attention(q_ref, k_ref, v_ref, {}, 0.0, /*is_causal=*/true, std::nullopt,
                                                        /*enable_gqa=*/s.heads != s.kv_heads);
  out_ref.backward(grad_out);

  at::Tensor q_k = q.detach().requires_grad_(), k_k = k.detach().requires_grad_(), v_k = v.detach().requires_grad_();
  at::Tensor out = fused::cpu_causal_attention(q_k, k_k, v_k);
  out.backward(grad_out);
  check_close(out, out_ref, name + " output");
  check_close(q_k.grad(), q_ref.grad(), name + " dq");
  check_close(k_k.grad(), k_ref.grad(), name + " dk");
  check_close(v_k.grad(), v_ref.grad(), name + " dv");

  // Grad mode off (validation): the same output, nothing recorded.
  at::NoGradGuard no_grad;
  at::Tensor out_eval = fused::cpu_causal_attention(q, k, v);
  CHECK(!out_eval.requires_grad());
  check_close(out_eval, out_ref.detach(), name + " output without grad");
}

}  // namespace

TEST_CASE(
    "cpu attention kernel equals ATen's causal SDPA, forward and "
    "backward, fp32") {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    MESSAGE("TITAN_SKIPPED: this CPU lacks AVX2/FMA");
    return;
  }
  const Shape shapes[] = {
      {8, 16, 16, 128, 16, true},  // the Llama-3 debug model's attention
      {2, 4, 4, 37, 16, false},    // odd sequence, shorter than a row block
      {2, 4, 4, 129, 16, true},    // one row past four blocks
      {1, 2, 2, 1, 16, false},     // a single token
      {1, 3, 3, 70, 8, true},      // head_dim 8, batch 1
      {2, 2, 2, 67, 24, false},    // head_dim 24 (three vectors)
      {1, 2, 2, 45, 20, true},     // head_dim not a multiple of 8
      {1, 2, 2, 130, 64, true},    // head_dim 64
      {1, 2, 2, 300, 128, false},  // head_dim 128 (four-vector tiles), odd seq
      {2, 8, 2, 96, 16, true},     // grouped-query: 8 heads over 2 kv heads
      {1, 8, 2, 33, 24, false},    // grouped-query, odd
  };
  for (const Shape& s : shapes) check_against_aten(s);
  MESSAGE("largest error relative to the reference's max abs: " << worst_relative_seen);
}

TEST_CASE("cpu attention kernel is differentiable with respect to q alone") {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return;
  at::manual_seed(3);
  at::Tensor q = at::randn({1, 2, 19, 16}), k = at::randn({1, 2, 19, 16}), v = at::randn({1, 2, 19, 16});
  at::Tensor q_ref = q.clone().requires_grad_(), q_k = q.clone().requires_grad_();
  at::scaled_dot_product_attention(q_ref, k, v, {}, 0.0, true).sum().backward();
  fused::cpu_causal_attention(q_k, k, v).sum().backward();
  check_close(q_k.grad(), q_ref.grad(), "dq, k and v constants");
}

TEST_CASE(
    "CpuAttention takes the kernel at the debug shape and ATen where the "
    "kernel cannot run or is slower") {
  fused::CpuAttention layer;
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  at::Tensor q = at::randn({2, 16, 128, 16}), k = at::randn({2, 16, 128, 16}), v = at::randn({2, 16, 128, 16});
  CHECK(fused::cpu_attention_takes_kernel(q, k, v) == avx2);
  check_close(layer.forward(q, k, v, {}), at::scaled_dot_product_attention(q, k, v, {}, 0.0, true), "layer, debug shape");

  SUBCASE(
      "meta tensors (titan plan's dry run) give a meta result of the right "
      "shape") {
    at::Tensor qm = at::empty({8, 16, 128, 16}, at::kMeta), km = at::empty({8, 4, 128, 16}, at::kMeta);
    CHECK(!fused::cpu_attention_takes_kernel(qm, km, km));
    at::Tensor out = layer.forward(qm, km, km, {});
    CHECK(out.is_meta());
    CHECK(out.sizes() == qm.sizes());
  }
  SUBCASE("block-causal documents run through the kernel, a document at a time") {
    at::Tensor positions = at::arange(128, at::kLong).remainder(40).unsqueeze(0).expand({2, 128}).contiguous();
    at::Tensor documents = titan::document_ids(positions);
    at::Tensor out = layer.forward(q, k, v, documents);
    check_close(out, titan::compat::causal_attention(q, k, v, documents), "layer, documents");
    CHECK(!at::allclose(out, layer.forward(q, k, v, {}), 1e-3, 1e-3));
  }
  SUBCASE("bf16 takes ATen") {
    at::Tensor qb = q.to(at::kBFloat16), kb = k.to(at::kBFloat16), vb = v.to(at::kBFloat16);
    CHECK(!fused::cpu_attention_kernel_supports(qb, kb, vb));
    at::Tensor out = layer.forward(qb, kb, vb, {});
    CHECK((out.scalar_type() == at::kBFloat16));
    CHECK(at::equal(out, at::scaled_dot_product_attention(qb, kb, vb, {}, 0.0, true)));
  }
  SUBCASE(
      "the measured threshold: head_dim 64 takes the kernel at seq 1024, at seq 2048 on the AVX-512 path only, "
      "and ATen at seq 4096") {
    const bool avx512 = avx2 && __builtin_cpu_supports("avx512f");
    at::Tensor q1024 = at::randn({1, 1, 1024, 64}), q2048 = at::empty({1, 1, 2048, 64});
    at::Tensor q4096x64 = at::randn({1, 1, 4096, 64});
    CHECK(fused::cpu_attention_takes_kernel(q1024, q1024, q1024) == avx2);
    CHECK(fused::cpu_attention_takes_kernel(q2048, q2048, q2048) == avx512);
    at::Tensor q4096 = at::empty({1, 1, 4096, 16}), q256 = at::empty({1, 1, 128, 256});
    CHECK(fused::cpu_attention_takes_kernel(q4096, q4096, q4096) == avx2);  // seq x head_dim = 65536
    CHECK(!fused::cpu_attention_takes_kernel(q256, q256, q256));            // head_dim 256: not measured
    CHECK(fused::cpu_attention_kernel_supports(q4096x64, q4096x64, q4096x64) == avx2);
    CHECK(!fused::cpu_attention_takes_kernel(q4096x64, q4096x64, q4096x64));
    CHECK(at::equal(layer.forward(q4096x64, q4096x64, q4096x64, {}),
                    at::scaled_dot_product_attention(q4096x64, q4096x64, q4096x64, {}, 0.0, true)));
  }
  SUBCASE("the kernel refuses what it cannot run, saying what it got") {
    at::Tensor qb = q.to(at::kBFloat16);
    std::string message;
    try {
      fused::cpu_causal_attention(qb, qb, qb);
    } catch (const titan::Error& e) {
      message = e.what();
    }
    INFO(message);
    CHECK(message.find("BFloat16") != std::string::npos);
  }
}

TEST_CASE("cpu attention kernel with documents equals ATen's block-causal attention, forward and backward") {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    MESSAGE("TITAN_SKIPPED: this CPU lacks AVX2/FMA");
    return;
  }
  // Rows of uneven documents (one of a single token), grouped-query heads,
  // the AVX2 (head_dim 24) and, on AVX-512 CPUs, the 16-lane (64) paths.
  for (const Shape& s : {Shape{3, 4, 2, 41, 24, true}, Shape{2, 2, 2, 70, 64, false}}) {
    const std::string name = name_of(s) + " with documents";
    at::manual_seed(17 + s.head_dim);
    at::Tensor q = make(s, s.heads), k = make(s, s.kv_heads), v = make(s, s.kv_heads);
    at::Tensor grad_out = at::randn({s.batch, s.heads, s.seq, s.head_dim});
    // Document ids: a new document at random starts, the first row one whole document.
    at::Tensor documents = at::zeros({s.batch, s.seq}, at::kLong);
    for (int64_t row = 1; row < s.batch; ++row) {
      int64_t id = 0;
      for (int64_t i = 1; i < s.seq; ++i) {
        if (at::rand({1}).item<double>() < 0.15 || i == 5) ++id;
        documents[row][i] = id;
      }
    }
    at::Tensor q_ref = q.detach().requires_grad_(), k_ref = k.detach().requires_grad_(),
               v_ref = v.detach().requires_grad_();
    at::Tensor out_ref = titan::compat::causal_attention(q_ref, k_ref, v_ref, documents);
    out_ref.backward(grad_out);
    at::Tensor q_k = q.detach().requires_grad_(), k_k = k.detach().requires_grad_(), v_k = v.detach().requires_grad_();
    at::Tensor out = fused::cpu_causal_attention(q_k, k_k, v_k, documents);
    out.backward(grad_out);
    check_close(out, out_ref, name + " output");
    check_close(q_k.grad(), q_ref.grad(), name + " dq");
    check_close(k_k.grad(), k_ref.grad(), name + " dk");
    check_close(v_k.grad(), v_ref.grad(), name + " dv");
    // Not the plain causal attention: the documents matter in these rows.
    const at::Tensor causal = fused::cpu_causal_attention(q.detach(), k.detach(), v.detach());
    CHECK((causal - out.detach()).abs().max().item<double>() > 1e-3);
    at::NoGradGuard no_grad;
    check_close(fused::cpu_causal_attention(q, k, v, documents), out_ref.detach(), name + " output without grad");
  }
  CHECK_THROWS_AS(fused::cpu_causal_attention(at::randn({1, 2, 8, 16}), at::randn({1, 2, 8, 16}),
                                              at::randn({1, 2, 8, 16}), at::zeros({1, 7}, at::kLong)),
                  titan::Error);
}
