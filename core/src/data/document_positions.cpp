// Document positions of loaded windows, and the microbatch the step takes.
#include <ATen/ATen.h>

#include "titan/data.hpp"
#include "titan/error.hpp"

namespace titan {

at::Tensor document_positions(const at::Tensor& inputs, const DocumentBoundaries& boundaries) {
  if (inputs.dim() != 2 || inputs.scalar_type() != at::kLong || !inputs.device().is_cpu()) {
    throw Error("document positions: expected int64 token ids [batch, seq] in host memory, got " +
                c10::str(inputs.sizes()) + " " + c10::toString(inputs.scalar_type()) + " on " + inputs.device().str());
  }
  const at::Tensor tokens = inputs.contiguous();
  at::Tensor positions = at::empty_like(tokens);
  const int64_t rows = tokens.size(0), seq = tokens.size(1);
  const int64_t* token = tokens.data_ptr<int64_t>();
  int64_t* position = positions.data_ptr<int64_t>();
  for (int64_t row = 0; row < rows; ++row) {
    for (int64_t i = 0; i < seq; ++i) {
      const int64_t at = row * seq + i;
      const bool starts = i == 0 || token[at] == boundaries.bos_id || token[at - 1] == boundaries.eos_id;
      position[at] = starts ? 0 : position[at - 1] + 1;
    }
  }
  return positions;
}

Microbatch microbatch_of(const at::Tensor& windows, const c10::Device& device,
                         const std::optional<DocumentBoundaries>& boundaries) {
  const int64_t length = windows.size(1) - 1;
  Microbatch microbatch;
  if (boundaries) {
    // Found on the host, before the copy: the step never reads the device.
    microbatch.document_positions = document_positions(windows.narrow(1, 0, length), *boundaries).to(device);
  }
  at::Tensor on_device = windows.to(device);
  microbatch.inputs = on_device.narrow(1, 0, length);
  microbatch.labels = on_device.narrow(1, 1, length);
  return microbatch;
}

}  // namespace titan
