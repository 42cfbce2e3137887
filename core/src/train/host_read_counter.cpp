// One global RecordFunction callback; the counts are atomics and the sites a
// short list under a mutex, as ops run on autograd's threads too. `titan
// plan`'s dry run asks the same questions per simulated rank (plan/dry_run.cpp).
#include "host_read_counter.hpp"

#include <ATen/record_function.h>
#include <c10/util/Backtrace.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <sstream>

#include "titan/comm.hpp"

namespace titan {

namespace {

constexpr size_t kSitesKept = 4;

std::atomic<int64_t> reads{0};
std::atomic<bool> watch_copies{false};  // the run's tensors are on a device
std::mutex sites_mutex;
std::vector<std::string> sites;

// A frame of the counting itself (this file's, or the dry run's callback).
bool counting_frame(const std::string& line) {
  for (const char* own : {"HostReadCounter", "host_wait_site", "(anonymous namespace)::note"}) {
    if (line.find(own) != std::string::npos) return true;
  }
  return false;
}

// The Titan frames of the current stack, innermost first: which function
// of ours asked for the value.
std::string titan_frames() {
  std::istringstream frames(c10::get_backtrace(/*frames_to_skip=*/1, /*maximum_number_of_frames=*/48));
  std::string text, line;
  int kept = 0;
  while (std::getline(frames, line) && kept < 3) {
    const auto at = line.find("titan::");
    if (at == std::string::npos || counting_frame(line)) continue;
    std::string frame = line.substr(at);
    frame = frame.substr(0, frame.find(" + "));  // drop the offset
    if (frame.size() > 160) frame = frame.substr(0, 160) + "...";
    text += (kept++ ? " <- " : "") + frame;
  }
  return text.empty() ? "(no Titan frame)" : text;
}

// A copy between host memory and a device that makes the host wait: every
// copy to the host (it reads the values), and a copy from the host without
// non_blocking (ATen synchronizes the stream after it, so the host waits for
// everything queued before).
bool waiting_copy(const at::RecordFunction& fn) {
  if (std::strcmp(fn.name(), "aten::copy_") != 0) return false;
  auto inputs = fn.inputs();
  if (inputs.size() < 2 || !inputs[0].isTensor() || !inputs[1].isTensor()) return false;
  const bool into_host = inputs[0].toTensor().is_cpu(), from_host = inputs[1].toTensor().is_cpu();
  if (into_host && !from_host) return true;
  const bool non_blocking = inputs.size() > 2 && inputs[2].isBool() && inputs[2].toBool();
  return from_host && !into_host && !non_blocking;
}

void note(const at::RecordFunction& fn) {
  reads.fetch_add(1);
  std::lock_guard<std::mutex> lock(sites_mutex);
  if (sites.size() >= kSitesKept) return;
  sites.push_back(host_wait_site(fn));
}

// Ops whose CUDA kernels read values to the host themselves (an output
// size that depends on them, or a range check): they wait for a GPU even
// where the CPU does not, so they count on every device.
bool reads_inside_on_cuda(const at::RecordFunction& fn) {
  static const char* const always[] = {"aten::nonzero", "aten::argwhere", "aten::masked_select",
                                       "aten::bincount", "aten::_unique",  "aten::_unique2",
                                       "aten::unique_dim", "aten::unique_consecutive"};
  for (const char* name : always) {
    if (std::strcmp(fn.name(), name) == 0) return true;
  }
  if (std::strcmp(fn.name(), "aten::repeat_interleave") != 0) return false;
  // The overload on a tensor of repeats alone (the others call it): the
  // output's size is their sum unless given.
  auto inputs = fn.inputs();
  return inputs.size() == 2 && inputs[0].isTensor() && inputs[1].isNone();
}

}  // namespace

bool makes_host_wait(const at::RecordFunction& fn, bool on_device) {
  return std::strcmp(fn.name(), "aten::_local_scalar_dense") == 0 || reads_inside_on_cuda(fn) ||
         (on_device && waiting_copy(fn));
}

std::string host_wait_site(const at::RecordFunction& fn) {
  return std::string(fn.name()) + " at '" + CallSite::current() + "' from " + titan_frames();
}

HostReadCounter::HostReadCounter(bool on_device) {
  watch_copies.store(on_device);
  auto callback = at::RecordFunctionCallback(
                      [](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
                        if (makes_host_wait(fn, watch_copies.load())) note(fn);
                        return nullptr;
                      })
                      .needsInputs(true)
                      .scopes({at::RecordScope::FUNCTION});
  handle_ = at::addGlobalCallback(std::move(callback));
}

HostReadCounter::~HostReadCounter() { at::removeCallback(handle_); }

HostReadCounter::Reads HostReadCounter::take() {
  Reads taken;
  taken.count = reads.exchange(0);
  std::lock_guard<std::mutex> lock(sites_mutex);
  taken.sites.swap(sites);
  return taken;
}

}  // namespace titan
