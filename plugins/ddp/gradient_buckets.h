// Gradient buckets: parameters in reverse registration order (the order
// backward produces their gradients), grouped up to a byte cap. A bucket's
// all-reduce starts as soon as its last gradient is accumulated, in bucket
// order on every rank, and overlaps the rest of backward.
#pragma once
#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

#include "titan/comm.hpp"

namespace titan::ddp {

class GradientBuckets {
 public:
  GradientBuckets(std::vector<at::Tensor> params, int64_t bucket_bytes, Comm& comm);
  // Hooks the parameters' gradient accumulators (once they are materialized).
  void install_hooks(const std::function<bool()>& sync_enabled);
  bool hooks_installed() const { return !hooks_.empty(); }
  // Starts what is left (buckets with unused parameters), waits for every
  // all-reduce and writes the averaged gradients back.
  void finish();
  size_t bucket_count() const { return buckets_.size(); }

 private:
  struct Bucket {
    std::vector<size_t> params;  // indices into params_
    int64_t ready = 0;
    at::Tensor flat;
    std::unique_ptr<CommWork> work;
  };
  void mark_ready(size_t param);
  void launch_ready_buckets();
  void launch(Bucket& bucket);

  std::vector<at::Tensor> params_;
  std::vector<size_t> bucket_of_;
  std::vector<bool> param_ready_;
  std::vector<Bucket> buckets_;
  size_t next_launch_ = 0;
  Comm& comm_;
  std::vector<std::shared_ptr<void>> hooks_;
};

}  // namespace titan::ddp
