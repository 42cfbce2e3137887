// The CPU memory timeline behind profiling.enable_memory_snapshot: live
// bytes and their peak, the phase from Titan's ranges (on any thread), and
// the largest allocations live at the peak — not merely the largest of the
// window — read back from its JSON.
#include "doctest_torch.hpp"

#include <nlohmann/json.hpp>

#include <thread>

#include "titan/profile_range.hpp"
#include "train/cpu_memory_timeline.hpp"

using nlohmann::json;

namespace {

constexpr int64_t kMiB = 1 << 20;

at::Tensor mebibytes(int64_t count) { return at::empty({count * kMiB}, at::kByte); }

}  // namespace

TEST_CASE("CpuMemoryTimeline: the peak, each allocation's phase, and the largest allocations live at the peak") {
  titan::CpuMemoryTimeline timeline(/*max_samples=*/1000, /*top_allocations=*/2);
  timeline.set_step(1);
  at::Tensor weights = mebibytes(1);  // other, live throughout
  {
    titan::ProfileRange forward("forward");
    at::Tensor activations = mebibytes(4);
    at::Tensor from_a_worker;
    std::thread([&] { from_a_worker = mebibytes(1); }).join();  // the phase holds on every thread
    {
      titan::ProfileRange backward("backward");
      at::Tensor gradient = mebibytes(2);  // the peak: 1 + 4 + 1 + 2
    }
  }
  timeline.set_step(2);
  {
    titan::ProfileRange optimizer("optimizer");
    at::Tensor state = mebibytes(5);  // the largest of the window, but after the peak: 1 + 5
  }
  const json window = json::parse(timeline.take_window("period", 3));

  CHECK(window["rank"] == 3);
  CHECK(window["steps"]["first"] == 1);
  CHECK(window["steps"]["last"] == 2);
  CHECK(window["peak"]["bytes"] == 8 * kMiB);
  CHECK(window["peak"]["phase"] == "backward");
  CHECK(window["peak"]["step"] == 1);
  // Live at the peak, largest first: the activations and the gradient,
  // both freed since; not the optimizer's 5 MiB that came later.
  const json& top = window["top_allocations"];
  REQUIRE(top.size() == 2);
  CHECK(top[0]["bytes"] == 4 * kMiB);
  CHECK(top[0]["phase"] == "forward");
  CHECK(top[1]["bytes"] == 2 * kMiB);
  CHECK(top[1]["phase"] == "backward");
  CHECK(window["phases"]["other"]["allocated_bytes"] == 1 * kMiB);
  CHECK(window["phases"]["forward"]["allocated_bytes"] == 5 * kMiB);
  CHECK(window["phases"]["backward"]["allocated_bytes"] == 2 * kMiB);
  CHECK(window["phases"]["optimizer"]["allocated_bytes"] == 5 * kMiB);
  CHECK(window["phases"]["optimizer"]["max_live_bytes"] == 6 * kMiB);
  // Every allocation and free is a sample of the live bytes after it.
  std::vector<int64_t> live;
  for (const auto& sample : window["samples"]) live.push_back(sample["bytes"].get<int64_t>() / kMiB);
  CHECK(live == std::vector<int64_t>{1, 5, 6, 8, 6, 5, 1, 6, 1});
  CHECK(window["live_bytes"] == 1 * kMiB);

  // The next window starts from what is live.
  const json next = json::parse(timeline.take_window("period", 3));
  CHECK(next["peak"]["bytes"] == 1 * kMiB);
  REQUIRE(next["top_allocations"].size() == 1);
  CHECK(next["top_allocations"][0]["phase"] == "other");
  CHECK(next["samples"].empty());

  // Allocations after a window closes and before the next step starts
  // belong to that next step (the CI flake of memory_snapshot_test: a
  // sample of step 2 in the window of steps 3-4).
  at::Tensor between = mebibytes(1);
  timeline.set_step(4);
  at::Tensor during = mebibytes(1);
  const json after = json::parse(timeline.take_window("period", 3));
  CHECK(after["steps"]["first"] == 4);
  CHECK(after["steps"]["last"] == 4);
  REQUIRE(after["samples"].size() == 2);
  for (const auto& sample : after["samples"]) CHECK(sample["step"] == 4);
}

TEST_CASE("CpuMemoryTimeline: pipeline actions give their phase (not inside a validation), a refused allocation is kept") {
  titan::CpuMemoryTimeline timeline;
  timeline.set_step(7);
  {
    titan::ProfileRange action("pipeline 1B0");  // a full backward of stage 1, microbatch 0
    at::Tensor gradient = mebibytes(1);
    titan::ProfileRange send("pipeline 1SEND_B0");  // a send keeps the phase around it
    at::Tensor buffer = mebibytes(1);
    CHECK_THROWS(at::empty({int64_t{1} << 50}, at::kByte));  // 1 PiB: refused
  }
  {
    titan::ProfileRange validation("validation");
    titan::ProfileRange action("pipeline 0F0");  // a pipelined validation's forward is the validation's
    at::Tensor activations = mebibytes(3);
  }
  const json window = json::parse(timeline.take_window("out_of_memory", 0));
  CHECK(window["phases"]["backward"]["allocated_bytes"] == 2 * kMiB);
  CHECK(window["phases"]["validation"]["allocated_bytes"] == 3 * kMiB);
  CHECK(window["phases"]["forward"]["allocated_bytes"] == 0);
  CHECK(window["failed_allocation"]["bytes"] == int64_t{1} << 50);
  CHECK(window["failed_allocation"]["phase"] == "backward");
  CHECK(window["failed_allocation"]["step"] == 7);
  CHECK(window["failed_allocation"]["live_bytes"] == 2 * kMiB);
}
