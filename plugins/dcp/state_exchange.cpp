// Texts travel as byte tensors padded to the longest one, since the
// all-gather needs one shape on every rank.
#include "state_exchange.h"

#include <ATen/ATen.h>

#include <cstring>

#include "titan/comm.hpp"

namespace titan::dcp {

std::vector<std::string> all_gather_text(Comm* comm, const std::string& text) {
  if (!comm || comm->size() == 1) return {text};
  at::Tensor length = at::full({1}, static_cast<int64_t>(text.size()), at::kLong);
  at::Tensor lengths = comm->all_gather(length);
  int64_t longest = lengths.max().item<int64_t>();
  at::Tensor mine = at::zeros({std::max<int64_t>(longest, 1)}, at::kByte);
  std::memcpy(mine.data_ptr(), text.data(), text.size());
  at::Tensor all = comm->all_gather(mine).view({comm->size(), -1});
  std::vector<std::string> texts;
  for (int rank = 0; rank < comm->size(); ++rank) {
    const char* bytes = static_cast<const char*>(all[rank].data_ptr());
    texts.emplace_back(bytes, static_cast<size_t>(lengths[rank].item<int64_t>()));
  }
  return texts;
}

bool all_ok(Comm* comm, bool ok) {
  if (!comm || comm->size() == 1) return ok;
  at::Tensor failed = at::full({1}, ok ? 0 : 1, at::kInt);
  comm->all_reduce(failed, ReduceOp::max);
  return failed.item<int>() == 0;
}

void barrier(Comm* comm) {
  if (comm && comm->size() > 1) comm->barrier();
}

}  // namespace titan::dcp
