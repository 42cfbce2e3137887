// Document positions of loaded windows, and the microbatch the step takes.
#include <ATen/ATen.h>

#include "titan/data.hpp"
#include "titan/error.hpp"
#include "titan/host_to_device.hpp"

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

Microbatch microbatch_of(const at::Tensor& windows, const c10::Device& device, const DocumentOptions& documents,
                         double weight_per_label) {
  const int64_t rows = windows.size(0), length = windows.size(1) - 1;
  at::Tensor inputs = windows.narrow(1, 0, length), labels = windows.narrow(1, 1, length);
  std::vector<int64_t> carrying(static_cast<size_t>(rows), length);
  const bool padded = documents.packing != Packing::concat_then_split;
  if (padded || documents.ignore_crossing_labels || documents.context_only_tokens) {
    // On the host, before the copy: the step never reads the device.
    inputs = inputs.clone();
    labels = labels.clone();
    const at::Tensor tokens = windows.contiguous();
    const int64_t* token = tokens.data_ptr<int64_t>();
    int64_t *input = inputs.data_ptr<int64_t>(), *label = labels.data_ptr<int64_t>();
    const DocumentBoundaries* ignored_crossings = documents.ignore_crossing_labels ? &documents.boundaries : nullptr;
    for (int64_t row = 0; row < rows; ++row) {
      for (int64_t i = 0; i < length; ++i) {
        const int64_t at = row * (length + 1) + i, out = row * length + i;
        input[out] = token[at] == kPaddingToken ? documents.boundaries.eos_id : token_id(token[at]);
        if (label_carries_loss(token[at], token[at + 1], ignored_crossings)) {
          label[out] = token_id(token[at + 1]);
          continue;
        }
        label[out] = kIgnoredLabel;
        --carrying[static_cast<size_t>(row)];
      }
    }
  }
  Microbatch microbatch;
  if (documents.positions) {
    microbatch.document_positions = host_to_device(document_positions(inputs, documents.boundaries), device);
  }
  if (weight_per_label > 0) {
    for (int64_t count : carrying) microbatch.row_weights.push_back(static_cast<double>(count) * weight_per_label);
  }
  microbatch.inputs = host_to_device(inputs, device);
  microbatch.labels = host_to_device(labels, device);
  return microbatch;
}

}  // namespace titan
