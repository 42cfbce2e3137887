// Muon (Jordan et al. 2024; torch.optim.Muon): momentum orthogonalized by a
// Newton-Schulz iteration for the 2-D hidden weights, AdamW for the rest.
// A matrix sharded over ranks (FSDP, TP) is orthogonalized whole, once per
// step, by one of the ranks that hold it (round-robin over its layout's mesh
// dims), and each rank takes its piece of the result.
#pragma once
#include <array>
#include <map>
#include <string>
#include <vector>

#include "titan/optimizer.hpp"

namespace titan::muon {

struct MuonOptions {
  double momentum = 0.95;
  bool nesterov = true;
  double weight_decay = 0.1;
  std::array<double, 3> ns_coefficients = {3.4445, -4.7750, 2.0315};
  int64_t ns_steps = 5;
  double eps = 1e-7;
  // The update's scale by the matrix's shape [A, B]: original sqrt(max(1, A / B)),
  // match_rms_adamw 0.2 * sqrt(max(A, B)), none 1.
  enum class AdjustLr { original, match_rms_adamw, none };
  AdjustLr adjust_lr = AdjustLr::original;
  c10::ScalarType ns_dtype = c10::kBFloat16;
  // A parameter whose name contains one of these goes to AdamW, as does
  // every parameter that is not 2-D.
  std::vector<std::string> adamw_params = {"tok_embeddings", "output"};
  double adamw_beta1 = 0.9;
  double adamw_beta2 = 0.95;
  double adamw_eps = 1e-8;
  double adamw_weight_decay = 0.1;
};

// The Newton-Schulz iteration of torch.optim.Muon in `dtype`: an
// approximately orthogonal matrix with the row and column spaces of `g`.
at::Tensor orthogonalize(const at::Tensor& g, const MuonOptions& options);

class Muon : public Optimizer {
 public:
  // Allocates every state tensor now (zeros), so that a checkpoint can be
  // loaded into state_tensors() in place before the first step.
  Muon(const std::vector<NamedParameter>& params, const MuonOptions& options);

  void step(double lr) override;
  void zero_grad() override;
  std::map<std::string, at::Tensor> state_tensors() override;

 private:
  struct MatrixState {
    NamedParameter param;
    at::Tensor momentum_buffer;  // like the local piece
    int64_t index = 0;           // among the matrices: which rank orthogonalizes it
  };
  struct AdamWState {
    NamedParameter param;
    at::Tensor exp_avg, exp_avg_sq;
    at::Tensor step;  // 0-dim float64 on CPU
  };
  // This rank's piece of the orthogonalized `update` (its piece too).
  at::Tensor orthogonalized_piece(const MatrixState& state, const at::Tensor& update) const;
  void step_matrix(MatrixState& state, double lr);
  void step_adamw(AdamWState& state, double lr);

  MuonOptions options_;
  std::vector<MatrixState> matrices_;
  std::vector<AdamWState> others_;
};

}  // namespace titan::muon
