// GradientBuckets: flatten, all-reduce (average) asynchronously, unflatten.
#include "gradient_buckets.h"

#include <ATen/ATen.h>

#include "titan/compat.hpp"

namespace titan::ddp {

GradientBuckets::GradientBuckets(std::vector<at::Tensor> params, int64_t bucket_bytes, Comm& comm)
    : params_(std::move(params)), comm_(comm) {
  bucket_of_.resize(params_.size());
  param_ready_.assign(params_.size(), false);
  int64_t bytes = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    int64_t size = static_cast<int64_t>(params_[k].numel()) * 4;
    if (buckets_.empty() || (bytes > 0 && bytes + size > bucket_bytes)) {
      buckets_.emplace_back();
      bytes = 0;
    }
    buckets_.back().params.push_back(k);
    bucket_of_[k] = buckets_.size() - 1;
    bytes += size;
  }
}

void GradientBuckets::install_hooks(const std::function<bool()>& sync_enabled) {
  for (size_t k = 0; k < params_.size(); ++k) {
    hooks_.push_back(compat::on_gradient_accumulated(params_[k], [this, k, sync_enabled] {
      if (sync_enabled()) mark_ready(k);
    }));
  }
}

void GradientBuckets::mark_ready(size_t param) {
  if (param_ready_[param]) return;  // a parameter used twice is counted once
  param_ready_[param] = true;
  ++buckets_[bucket_of_[param]].ready;
  launch_ready_buckets();
}

void GradientBuckets::launch_ready_buckets() {
  // Strictly in bucket order, so every rank issues the same sequence.
  while (next_launch_ < buckets_.size() &&
         buckets_[next_launch_].ready == static_cast<int64_t>(buckets_[next_launch_].params.size())) {
    launch(buckets_[next_launch_++]);
  }
}

void GradientBuckets::launch(Bucket& bucket) {
  CallSite site("ddp all_reduce bucket " + std::to_string(&bucket - buckets_.data()));
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> pieces;
  for (size_t k : bucket.params) {
    const at::Tensor& grad = params_[k].grad();
    pieces.push_back(grad.defined() ? grad.reshape({-1}).to(at::kFloat) : at::zeros({params_[k].numel()}));
  }
  bucket.flat = at::cat(pieces);
  bucket.work = comm_.all_reduce_async(bucket.flat, ReduceOp::avg);
}

void GradientBuckets::finish() {
  for (auto& bucket : buckets_) bucket.ready = static_cast<int64_t>(bucket.params.size());
  launch_ready_buckets();
  at::NoGradGuard no_grad;
  for (auto& bucket : buckets_) {
    bucket.work->wait();
    int64_t offset = 0;
    for (size_t k : bucket.params) {
      at::Tensor& param = params_[k];
      at::Tensor averaged = bucket.flat.narrow(0, offset, param.numel()).view(param.sizes()).to(param.scalar_type());
      param.mutable_grad() = averaged;
      offset += param.numel();
    }
    bucket.work.reset();
    bucket.flat = at::Tensor();
    bucket.ready = 0;
  }
  param_ready_.assign(params_.size(), false);
  next_launch_ = 0;
}

}  // namespace titan::ddp
