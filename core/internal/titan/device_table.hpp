// The accelerators `titan plan` plans for: each one's memory, dense peak
// FLOP/s per dtype, memory bandwidth and link bandwidths, from the vendors'
// datasheets, plus `cpu`, measured on this machine. The step-time estimate
// (step_estimate.hpp) and the layout search (layout_search.hpp) read them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace titan {

struct DeviceSpec {
  std::string name;         // as users spell it: "h100-80gb"
  std::string description;  // "NVIDIA H100 SXM5 80 GB"
  int64_t memory_bytes = 0;  // what one device can hold
  // Dense peak FLOP/s (no sparsity). fp8 equals bf16 where the device has
  // no float8 tensor cores; fp32 is plain fp32, not TF32 (Titan leaves TF32 off).
  double bf16_flops = 0, fp8_flops = 0, fp32_flops = 0;
  double hbm_bytes_per_s = 0;         // device memory bandwidth
  double intra_node_bytes_per_s = 0;  // per device, one direction (NVLink)
  double inter_node_bytes_per_s = 0;  // per device, one direction (its NIC)
  int64_t devices_per_node = 1;
  // The share of the bf16 (fp32) peak a training step's matmuls and
  // attention reach, elementwise kernels folded in (step_estimate.hpp).
  double matmul_efficiency = 0.40;
  std::string source;  // where the numbers come from
  bool has_float8() const { return fp8_flops > bf16_flops; }
};

// Names of every known device, without measuring the CPU.
std::vector<std::string> known_device_names();
// Every known device; the first call measures `cpu` (about half a second).
const std::vector<DeviceSpec>& known_devices();
// Throws titan::Error naming the known devices when `name` is none of them.
DeviceSpec find_device(const std::string& name);

}  // namespace titan
