// The device table: datasheet numbers for the GPUs, a measurement for the
// CPU. Dense (no 2:4 sparsity) peaks, since training matmuls are dense.
#include "titan/device_table.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include <c10/util/StringUtil.h>

#include "titan/error.hpp"
#include "train/step_metrics.hpp"

namespace titan {

namespace {

constexpr double kTera = 1e12, kGiga = 1e9;
constexpr int64_t kMiB = 1024 * 1024;
// TorchTitan reports 33-39% MFU for Llama 3.1 8B under FSDP on H100 without
// float8 (its docs/performance.md); Titan's CUDA step is not measured at scale.
constexpr double kGpuMatmulEfficiency = 0.40;

// Memory is what nvidia-smi reports as the total (MiB), the ceiling a run
// sees, not the marketing GB. Links are per GPU and direction: NVLink's
// bidirectional figure halved, the NIC's Gb/s over 8.
std::vector<DeviceSpec> datasheet_devices() {
  return {
      {"h100-80gb", "NVIDIA H100 SXM5 80 GB (HBM3)", 81559 * kMiB, 989.4 * kTera, 1978.9 * kTera, 66.9 * kTera,
       3.35e12, 450 * kGiga, 50 * kGiga, 8, kGpuMatmulEfficiency,
       "H100 datasheet (SXM5): 989 TFLOP/s bf16, 1979 fp8, 67 fp32 (non-tensor), 3.35 TB/s; NVLink 4 900 GB/s "
       "(450 per direction); one 400 Gb/s ConnectX-7 per GPU (DGX H100)"},
      {"h200", "NVIDIA H200 SXM 141 GB (HBM3e)", 143771 * kMiB, 989.4 * kTera, 1978.9 * kTera, 66.9 * kTera, 4.8e12,
       450 * kGiga, 50 * kGiga, 8, kGpuMatmulEfficiency,
       "H200 datasheet (SXM): the H100's compute, 141 GB at 4.8 TB/s; NVLink 4 900 GB/s; one 400 Gb/s NIC per "
       "GPU (DGX H200)"},
      {"b200", "NVIDIA B200 180 GB (HBM3e, as DGX B200 ships)", 183359 * kMiB, 2250 * kTera, 4500 * kTera,
       75 * kTera, 8e12, 900 * kGiga, 50 * kGiga, 8, kGpuMatmulEfficiency,
       "DGX B200 datasheet per GPU: 2.25 PFLOP/s bf16, 4.5 fp8 (dense), 75 TFLOP/s fp32, 180 GB at 8 TB/s; "
       "NVLink 5 1.8 TB/s (900 per direction); one 400 Gb/s ConnectX-7 per GPU"},
      {"a100-80gb", "NVIDIA A100 SXM4 80 GB (HBM2e)", 81920 * kMiB, 312 * kTera, 312 * kTera, 19.5 * kTera,
       2.039e12, 300 * kGiga, 25 * kGiga, 8, kGpuMatmulEfficiency,
       "A100 datasheet (SXM4 80 GB): 312 TFLOP/s bf16, no float8 tensor cores (fp8 = bf16), 19.5 fp32, 2.0 TB/s; "
       "NVLink 3 600 GB/s (300 per direction); one 200 Gb/s HDR NIC per GPU (DGX A100)"},
  };
}

// One thread's memcpy rate over buffers far larger than the caches: what
// a local rank's messages (Gloo through shared memory) move at.
double measure_memcpy_bytes_per_s() {
  const size_t bytes = 64 * static_cast<size_t>(kMiB);
  std::vector<char> from(bytes, 1), to(bytes, 0);
  std::memcpy(to.data(), from.data(), bytes);  // fault the pages in first
  int64_t copies = 0;
  double elapsed = 0;
  const auto start = std::chrono::steady_clock::now();
  while (elapsed < 0.1) {
    std::memcpy(to.data(), from.data(), bytes);
    from[static_cast<size_t>(copies) % bytes] = static_cast<char>(to[0] + 1);  // keep the copies observable
    ++copies;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return static_cast<double>(bytes) * static_cast<double>(copies) / elapsed;
}

// This machine as one node of one "device" per core: a rank per core, each
// with its share of the measured matmul rate and of the RAM, the ranks
// talking through memory. The cgroup limit is not read: the plan is of the
// machine, not of this process's container.
DeviceSpec measured_cpu() {
  const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  const double flops = cpu_peak_flops().flops / static_cast<double>(cores);
  const double memcpy_rate = measure_memcpy_bytes_per_s();
  const int64_t ram = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<int64_t>(sysconf(_SC_PAGE_SIZE));
  DeviceSpec cpu;
  cpu.name = "cpu";
  cpu.description = "this machine's CPU, one rank per core (" + std::to_string(cores) + " cores), measured";
  cpu.memory_bytes = ram / cores;
  // LibTorch's CPU matmuls run no faster in bf16 or float8: one rate for all.
  cpu.bf16_flops = cpu.fp8_flops = cpu.fp32_flops = flops;
  cpu.hbm_bytes_per_s = memcpy_rate;
  cpu.intra_node_bytes_per_s = cpu.inter_node_bytes_per_s = memcpy_rate;
  cpu.devices_per_node = cores;
  // The measured rate is already an achieved one; matmuls and attention
  // are 84% of Titan's CPU step (docs/benchmarks.md, "CPU vs PyTorch eager").
  cpu.matmul_efficiency = 0.84;
  cpu.source = "measured: a 512x512 float32 matmul on all threads (once per machine: ~/.cache/titan), divided by the cores; one thread's "
               "memcpy of 64 MiB for every bandwidth; RAM / cores (a busy machine measures low)";
  return cpu;
}

}  // namespace

std::vector<std::string> known_device_names() {
  std::vector<std::string> names;
  for (const auto& device : datasheet_devices()) names.push_back(device.name);
  names.push_back("cpu");
  return names;
}

const std::vector<DeviceSpec>& known_devices() {
  static const std::vector<DeviceSpec> devices = [] {
    std::vector<DeviceSpec> all = datasheet_devices();
    all.push_back(measured_cpu());
    return all;
  }();
  return devices;
}

DeviceSpec find_device(const std::string& name) {
  std::string wanted = name;
  std::transform(wanted.begin(), wanted.end(), wanted.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const auto& device : datasheet_devices()) {
    if (device.name == wanted) return device;
  }
  if (wanted == "cpu") return known_devices().back();  // measured once, on first use
  throw Error("unknown device '" + name + "'; known devices: " + c10::Join(", ", known_device_names()));
}

}  // namespace titan
