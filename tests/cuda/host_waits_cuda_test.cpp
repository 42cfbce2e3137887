// On a GPU, what the step does without waiting for the device: host memory
// reaches it through page-locked memory in stream order, with the values a
// blocking copy gives (a blocking `.to(cuda)` synchronizes the stream: the
// counter sees it), and is refused inside a CUDA graph's capture; MoE counts
// its experts' rows with no read (at::bincount reads two). Without a GPU:
// skipped; the meta-device checks are in tests/unit/host_to_device_test.cpp
// and tests/unit/moe_test.cpp.
#include "cuda_skip.hpp"

#include <ATen/ATen.h>

#include <string>

#include "titan/compat.hpp"
#include "titan/data.hpp"
#include "titan/error.hpp"
#include "titan/host_to_device.hpp"
#include "titan/moe.hpp"
#include "train/host_read_counter.hpp"

namespace {

TEST_CASE("host_to_device on CUDA: the values of a blocking copy, and no copy the host waits for") {
  TITAN_REQUIRE_CUDA("to copy host memory to a GPU");
  const at::Device device(at::kCUDA, 0);
  const at::Tensor host = at::randint(0, 1000, {8, 2049}, at::kLong);
  titan::HostReadCounter counter(/*on_device=*/true);
  const at::Tensor copied = titan::host_to_device(host, device);
  const at::Tensor cast = titan::host_to_device(host, device, at::kInt);
  const at::Tensor narrowed = titan::host_to_device(host.narrow(1, 1, 2048), device);  // a strided view
  CHECK(counter.take().count == 0);
  (void)host.to(device);  // blocking: ATen synchronizes the stream after it
  CHECK(counter.take().count == 1);
  CHECK(copied.is_cuda());
  CHECK(at::equal(copied.cpu(), host));
  CHECK(at::equal(cast.cpu(), host.to(at::kInt)));
  CHECK(at::equal(narrowed.cpu(), host.narrow(1, 1, 2048)));
}

TEST_CASE("a microbatch reaches a GPU without a copy the host waits for") {
  TITAN_REQUIRE_CUDA("to move a microbatch to a GPU");
  const at::Device device(at::kCUDA, 0);
  const at::Tensor windows = at::randint(3, 50, {4, 65}, at::kLong);
  titan::DocumentOptions documents{{1, 2}, titan::Packing::concat_then_split, /*positions=*/true,
                                   /*ignore_crossing_labels=*/false};
  titan::HostReadCounter counter(/*on_device=*/true);
  const titan::Microbatch batch = titan::microbatch_of(windows, device, documents);
  const titan::HostReadCounter::Reads reads = counter.take();
  CHECK_MESSAGE(reads.count == 0, (reads.sites.empty() ? std::string() : reads.sites[0]));
  const titan::Microbatch on_host = titan::microbatch_of(windows, at::kCPU, documents);
  CHECK(at::equal(batch.inputs.cpu(), on_host.inputs));
  CHECK(at::equal(batch.labels.cpu(), on_host.labels));
  CHECK(at::equal(batch.document_positions.cpu(), on_host.document_positions));
}

TEST_CASE("host_to_device refuses to copy inside a CUDA graph's capture, and the device works after") {
  TITAN_REQUIRE_CUDA("to capture a CUDA graph");
  const at::Device device(at::kCUDA, 0);
  const at::Tensor host = at::arange(16, at::kFloat);
  at::Tensor out = at::zeros({16}, at::TensorOptions().device(device));
  titan::compat::run_on_side_stream(device, [&] { out.add_(1); });  // warm-up outside the graph
  titan::compat::DeviceGraph graph(device);
  CHECK_THROWS_WITH_AS(graph.capture([&] { out.add_(titan::host_to_device(host, device)); }),
                       doctest::Contains("inside a CUDA graph's capture"), titan::Error);
  CHECK_FALSE(titan::compat::capturing_graph(device));
  out.add_(titan::host_to_device(host, device));
  CHECK(at::equal(out.cpu(), host + 1));
}

TEST_CASE("MoE counts its experts' rows on a GPU without a read: the counts at::bincount gives, which reads twice") {
  TITAN_REQUIRE_CUDA("to count on a GPU");
  const at::Device device(at::kCUDA, 0);
  const at::Tensor selected = at::randint(0, 6, {64, 2}, at::kLong);  // 8 experts: the last two get none
  titan::HostReadCounter counter(/*on_device=*/true);
  const at::Tensor counts = titan::count_per_expert(selected.to(device, at::kLong, /*non_blocking=*/true), 8);
  CHECK(counter.take().count == 0);
  (void)at::bincount(selected.to(device, at::kLong, /*non_blocking=*/true).view(-1), {}, 8);
  CHECK(counter.take().count >= 1);
  CHECK(at::equal(counts.cpu(), at::bincount(selected.view(-1), {}, 8)));
}

TEST_CASE("a MoE layer without expert parallelism trains on a GPU without a host read: its bf16 grouped GEMM is "
          "laid out on the device, and it gives the expert loop's numbers") {
  TITAN_REQUIRE_CUDA("to run the grouped GEMM on a GPU");
  const int capability = titan::compat::cuda_compute_capability();
  if (capability != 90 && capability != 100) {
    // LibTorch's fallback for other GPUs reads the group ends on the host itself.
    MESSAGE("TITAN_SKIPPED: at::_grouped_mm's bf16 kernel needs sm_90 or sm_100, this GPU is sm_" << capability);
    return;
  }
  torch::manual_seed(17);
  titan::MoEOptions options;
  options.num_experts = 8;
  options.top_k = 2;
  options.hidden_dim = 64;
  const at::TensorOptions bf16 = at::TensorOptions().dtype(at::kBFloat16).device(at::kCUDA);
  titan::MoE grouped(32, options, bf16);  // experts_backend auto: the grouped GEMM on CUDA
  titan::MoEOptions looped = options;
  looped.backend = titan::ExpertsBackend::loop;
  titan::MoE reference(32, looped, bf16);
  {
    torch::NoGradGuard no_grad;
    auto to = grouped.named_parameters();
    for (auto& item : reference.named_parameters()) {
      item.value().normal_(0, 0.2);
      to[item.key()].copy_(item.value());
    }
  }
  const at::Tensor x = at::randn({4, 16, 32}, bf16);
  const at::Tensor x_grouped = x.clone().requires_grad_();
  titan::HostReadCounter counter(/*on_device=*/true);
  const at::Tensor out = grouped.forward(x_grouped);
  out.to(at::kFloat).square().sum().backward();
  const titan::HostReadCounter::Reads reads = counter.take();
  CHECK_MESSAGE(reads.count == 0, (reads.sites.empty() ? std::string() : reads.sites[0]));
  const at::Tensor x_reference = x.clone().requires_grad_();
  const at::Tensor expected = reference.forward(x_reference);
  expected.to(at::kFloat).square().sum().backward();
  CHECK(at::allclose(out.to(at::kFloat), expected.to(at::kFloat), 2e-2, 2e-2));
  CHECK(at::allclose(x_grouped.grad().to(at::kFloat), x_reference.grad().to(at::kFloat), 2e-2, 2e-2));
}

}  // namespace
