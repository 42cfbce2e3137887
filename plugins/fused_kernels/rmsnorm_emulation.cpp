// RMSNorm as cuda/rmsnorm.cu computes it: fp32 row statistics, the
// normalized value rounded to T before the weight multiply, and the weight
// gradient summed per row group (rows g, g + groups, ...) then over groups.
#include <ATen/ATen.h>

#include "fused_ops.h"

namespace titan::fused {

int64_t rmsnorm_row_groups(int64_t rows) { return std::min<int64_t>(rows, 512); }

RmsNormForward emulated_rmsnorm_forward(const at::Tensor& x, const at::Tensor& weight, double eps) {
  int64_t dim = x.size(-1);
  at::Tensor x32 = x.reshape({-1, dim}).to(at::kFloat);
  at::Tensor rstd = at::rsqrt((x32 * x32).sum(1) / static_cast<double>(dim) + eps);
  at::Tensor normed = (x32 * rstd.unsqueeze(1)).to(x.scalar_type()).to(at::kFloat);
  at::Tensor y = (normed * weight.to(at::kFloat)).to(x.scalar_type());
  return {y.view(x.sizes()), rstd};
}

RmsNormGrads emulated_rmsnorm_backward(const at::Tensor& grad_y, const at::Tensor& x, const at::Tensor& weight,
                                       const at::Tensor& rstd) {
  int64_t dim = x.size(-1);
  at::Tensor x32 = x.reshape({-1, dim}).to(at::kFloat);
  at::Tensor dy = grad_y.reshape({-1, dim}).to(at::kFloat);
  int64_t rows = x32.size(0);
  at::Tensor normed = x32 * rstd.unsqueeze(1);
  at::Tensor d_normed = dy * weight.to(at::kFloat);
  at::Tensor mean_dot = (d_normed * normed).sum(1, /*keepdim=*/true) / static_cast<double>(dim);
  at::Tensor grad_x = (rstd.unsqueeze(1) * (d_normed - normed * mean_dot)).to(x.scalar_type());
  // Row r goes to group r % groups: pad to whole rounds of groups, fold.
  int64_t groups = rmsnorm_row_groups(rows);
  int64_t rounds = (rows + groups - 1) / groups;
  at::Tensor contributions = at::zeros({rounds * groups, dim}, x32.options());
  contributions.narrow(0, 0, rows).copy_(dy * normed);
  at::Tensor partial = contributions.view({rounds, groups, dim}).sum(0);
  at::Tensor grad_weight = partial.sum(0).to(weight.scalar_type());
  return {grad_x.view(x.sizes()), grad_weight};
}

}  // namespace titan::fused
