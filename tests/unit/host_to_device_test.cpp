// Host memory reaches a device without making the host wait
// (titan/host_to_device.hpp), and debug.count_host_reads counts the copies
// that do wait (train/host_read_counter.hpp). Checked here on the meta
// device, which dispatches the same copies a CUDA device does but holds no
// values; the page-locked CUDA path and its refusal inside a graph's capture
// are in tests/cuda/host_waits_cuda_test.cpp.
#include "doctest_torch.hpp"

#include <ATen/ATen.h>
#include <ATen/TensorIndexing.h>

#include <functional>
#include <string>

#include "titan/data.hpp"
#include "titan/error.hpp"
#include "titan/host_to_device.hpp"
#include "titan/moe.hpp"
#include "train/host_read_counter.hpp"

namespace {

const at::Device kMeta(at::kMeta);

TEST_CASE("host_to_device: the CPU keeps the tensor, a device gets a copy of its shape and dtype, and the dtype is cast "
          "on the host") {
  const at::Tensor host = at::arange(12, at::kLong).view({3, 4});
  CHECK(titan::host_to_device(host, at::kCPU).is_same(host));
  const at::Tensor on_meta = titan::host_to_device(host, kMeta);
  CHECK(on_meta.is_meta());
  CHECK(on_meta.sizes() == host.sizes());
  CHECK((on_meta.scalar_type() == at::kLong));
  CHECK((titan::host_to_device(host, kMeta, at::kInt).scalar_type() == at::kInt));
  const at::Tensor cast = titan::host_to_device(host, at::kCPU, at::kInt);
  CHECK((cast.scalar_type() == at::kInt));
  CHECK(at::equal(cast, host.to(at::kInt)));
  CHECK_THROWS_WITH_AS(titan::host_to_device(on_meta, kMeta), doctest::Contains("expected a tensor in host memory"),
                       titan::Error);
}

TEST_CASE("the host-read counter counts the copies the host waits for: to the host, and from it without non_blocking") {
  titan::HostReadCounter counter(/*on_device=*/true);
  const at::Tensor host = at::ones({4}, at::kLong);
  (void)host.to(kMeta);
  titan::HostReadCounter::Reads blocking = counter.take();
  CHECK(blocking.count == 1);
  REQUIRE(blocking.sites.size() == 1);
  CHECK(blocking.sites[0].rfind("aten::copy_", 0) == 0);
  (void)host.to(kMeta, at::kLong, /*non_blocking=*/true);
  (void)titan::host_to_device(host, kMeta);
  (void)host.clone();  // host to host: no device to wait for
  CHECK(counter.take().count == 0);
  (void)host.sum().item<int64_t>();  // a value read by the host
  CHECK(counter.take().count == 1);
}

TEST_CASE("the host-read counter counts, on the CPU too, the ops whose CUDA kernels read values to the host") {
  titan::HostReadCounter counter(/*on_device=*/false);
  const at::Tensor ids = at::randint(0, 4, {12}, at::kLong);
  const at::Tensor repeats = at::full({4}, int64_t{2}, at::kLong);
  auto reads_of = [&](const std::function<void()>& op) {
    (void)counter.take();
    op();
    return counter.take().count;
  };
  CHECK(reads_of([&] { (void)at::nonzero(ids); }) >= 1);
  CHECK(reads_of([&] { (void)at::masked_select(ids, ids.gt(1)); }) >= 1);
  CHECK(reads_of([&] { (void)at::bincount(ids, {}, 4); }) >= 1);
  CHECK(reads_of([&] { (void)at::_unique2(ids); }) >= 1);
  CHECK(reads_of([&] { (void)ids.index({ids.gt(1)}); }) >= 1);  // a boolean mask: nonzero inside
  CHECK(reads_of([&] { (void)at::repeat_interleave(at::arange(4), repeats); }) >= 1);
  CHECK(reads_of([&] { (void)at::repeat_interleave(repeats); }) >= 1);
  // Their sync-free forms count nothing.
  CHECK(reads_of([&] { (void)at::repeat_interleave(at::arange(4), repeats, 0, 8); }) == 0);
  CHECK(reads_of([&] { (void)titan::count_per_expert(ids, 4); }) == 0);
  CHECK(reads_of([&] { (void)at::where(ids.gt(1), ids, at::zeros_like(ids)); }) == 0);
}

TEST_CASE("a microbatch reaches the device without a copy the host waits for, document positions included") {
  titan::HostReadCounter counter(/*on_device=*/true);
  const at::Tensor windows = at::randint(3, 50, {2, 9}, at::kLong);
  titan::DocumentOptions documents{{1, 2}, titan::Packing::concat_then_split, /*positions=*/true,
                                   /*ignore_crossing_labels=*/true};
  const titan::Microbatch batch = titan::microbatch_of(windows, kMeta, documents, /*weight_per_label=*/0.5);
  CHECK(batch.inputs.is_meta());
  CHECK(batch.labels.is_meta());
  CHECK(batch.document_positions.is_meta());
  CHECK(batch.inputs.sizes() == at::IntArrayRef{2, 8});
  const titan::HostReadCounter::Reads reads = counter.take();
  CHECK_MESSAGE(reads.count == 0, (reads.sites.empty() ? std::string() : reads.sites[0]));
}

TEST_CASE("the grouped experts' layout reaches the device without a copy the host waits for") {
  const int64_t experts = 3, dim = 16, hidden = 32;
  titan::MoEOptions options;
  options.backend = titan::ExpertsBackend::grouped_mm;
  options.token_group_alignment = 4;  // pads every group: the gather and keep indices are used too
  titan::GroupedExperts grouped(experts, dim, hidden, options, at::TensorOptions().device(kMeta));
  // at::_grouped_mm reads its group ends on the host (no meta kernel): the
  // product's shape stands in for it, the layout around it is the real one.
  grouped.grouped_matmul = [](const at::Tensor& x, const at::Tensor& weights, const at::Tensor& /*group_ends*/,
                              const std::vector<int64_t>& /*group_rows*/) {
    return at::empty({x.size(0), weights.size(1)}, x.options());
  };
  const at::Tensor tokens = at::empty({10, dim}, at::TensorOptions().device(kMeta));
  titan::HostReadCounter counter(/*on_device=*/true);
  const at::Tensor out = grouped.forward(tokens, {3, 0, 7});
  CHECK(out.sizes() == tokens.sizes());
  const titan::HostReadCounter::Reads reads = counter.take();
  CHECK_MESSAGE(reads.count == 0, (reads.sites.empty() ? std::string() : reads.sites[0]));
}

}  // namespace
