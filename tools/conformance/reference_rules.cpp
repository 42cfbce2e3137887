// The reference optimizer rules in float64, state kept per parameter index.
#include "reference_rules.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

namespace titan::conformance {

namespace {

// torch.optim.AdamW: decoupled decay, bias-corrected moments.
class AdamWRule : public ReferenceRule {
 public:
  explicit AdamWRule(const ConfigNode& o, const std::string& prefix = "")
      : beta1_(o.require<double>(prefix + "beta1")), beta2_(o.require<double>(prefix + "beta2")),
        eps_(o.require<double>(prefix + "eps")), weight_decay_(o.require<double>(prefix + "weight_decay")) {}
  void step(std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads, double lr) override {
    if (m_.empty()) {
      for (const auto& p : params) m_.push_back(at::zeros_like(p)), v_.push_back(at::zeros_like(p));
    }
    ++t_;
    for (size_t i = 0; i < params.size(); ++i) {
      params[i] = params[i] * (1 - lr * weight_decay_);
      m_[i] = beta1_ * m_[i] + (1 - beta1_) * grads[i];
      v_[i] = beta2_ * v_[i] + (1 - beta2_) * grads[i] * grads[i];
      at::Tensor m_hat = m_[i] / (1 - std::pow(beta1_, t_));
      at::Tensor v_hat = v_[i] / (1 - std::pow(beta2_, t_));
      params[i] = params[i] - lr * m_hat / (v_hat.sqrt() + eps_);
    }
  }

 private:
  double beta1_, beta2_, eps_, weight_decay_;
  std::vector<at::Tensor> m_, v_;
  int t_ = 0;
};

// Lion (Chen et al. 2023): sign of the interpolation, then the momentum.
class LionRule : public ReferenceRule {
 public:
  explicit LionRule(const ConfigNode& o)
      : beta1_(o.require<double>("beta1")), beta2_(o.require<double>("beta2")),
        weight_decay_(o.require<double>("weight_decay")) {}
  void step(std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads, double lr) override {
    if (m_.empty()) {
      for (const auto& p : params) m_.push_back(at::zeros_like(p));
    }
    for (size_t i = 0; i < params.size(); ++i) {
      params[i] = params[i] * (1 - lr * weight_decay_) - lr * at::sign(beta1_ * m_[i] + (1 - beta1_) * grads[i]);
      m_[i] = beta2_ * m_[i] + (1 - beta2_) * grads[i];
    }
  }

 private:
  double beta1_, beta2_, weight_decay_;
  std::vector<at::Tensor> m_;
};

// torch.optim.SGD: coupled weight decay, momentum buffer seeded by the
// first gradient (no dampening, no Nesterov).
class SgdRule : public ReferenceRule {
 public:
  explicit SgdRule(const ConfigNode& o)
      : momentum_(o.require<double>("momentum")), weight_decay_(o.require<double>("weight_decay")) {}
  void step(std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads, double lr) override {
    for (size_t i = 0; i < params.size(); ++i) {
      at::Tensor d = grads[i] + weight_decay_ * params[i];
      if (momentum_ != 0) {
        if (buffers_.size() <= i) buffers_.push_back(d);
        else buffers_[i] = momentum_ * buffers_[i] + d;
        d = buffers_[i];
      }
      params[i] = params[i] - lr * d;
    }
  }

 private:
  double momentum_, weight_decay_;
  std::vector<at::Tensor> buffers_;
};

// torch.optim.Muon for the 2-D parameters (the harness's are named so that
// no adamw_params pattern of a declaration should match them), AdamW with
// the adamw_* options for the rest; the Newton-Schulz iteration in float64.
class MuonRule : public ReferenceRule {
 public:
  explicit MuonRule(const ConfigNode& o)
      : momentum_(o.require<double>("momentum")), weight_decay_(o.require<double>("weight_decay")),
        eps_(o.require<double>("eps")), nesterov_(o.require<bool>("nesterov")),
        ns_steps_(o.require<int64_t>("ns_steps")), adjust_(o.require<std::string>("adjust_lr_fn")),
        coefficients_(o.get<std::vector<double>>("ns_coefficients", {3.4445, -4.7750, 2.0315})),
        adamw_(o, "adamw_") {}
  void step(std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads, double lr) override {
    std::vector<at::Tensor> others, other_grads;
    std::vector<size_t> other_index;
    if (buffers_.empty()) {
      for (const auto& p : params) buffers_.push_back(at::zeros_like(p));
    }
    for (size_t i = 0; i < params.size(); ++i) {
      if (params[i].dim() != 2) {
        others.push_back(params[i]), other_grads.push_back(grads[i]), other_index.push_back(i);
        continue;
      }
      buffers_[i] = momentum_ * buffers_[i] + (1 - momentum_) * grads[i];
      at::Tensor update = nesterov_ ? (1 - momentum_) * grads[i] + momentum_ * buffers_[i] : buffers_[i];
      const double rows = static_cast<double>(params[i].size(0)), cols = static_cast<double>(params[i].size(1));
      const double ratio = adjust_ == "original"          ? std::sqrt(std::max(1.0, rows / cols))
                           : adjust_ == "match_rms_adamw" ? 0.2 * std::sqrt(std::max(rows, cols))
                                                          : 1.0;
      params[i] = params[i] * (1 - lr * weight_decay_) - lr * ratio * newton_schulz(update);
    }
    adamw_.step(others, other_grads, lr);
    for (size_t k = 0; k < others.size(); ++k) params[other_index[k]] = others[k];
  }

 private:
  // X / |X|, then X <- a X + (b A + c A^2) X with A = X X^T, on the wide side.
  at::Tensor newton_schulz(const at::Tensor& g) const {
    const bool tall = g.size(0) > g.size(1);
    at::Tensor x = tall ? g.t() : g;
    x = x / std::max(x.norm().item<double>(), eps_);
    for (int64_t i = 0; i < ns_steps_; ++i) {
      at::Tensor a = at::matmul(x, x.t());
      x = coefficients_[0] * x + at::matmul(coefficients_[1] * a + coefficients_[2] * at::matmul(a, a), x);
    }
    return tall ? x.t() : x;
  }

  double momentum_, weight_decay_, eps_;
  bool nesterov_;
  int64_t ns_steps_;
  std::string adjust_;
  std::vector<double> coefficients_;
  AdamWRule adamw_;
  std::vector<at::Tensor> buffers_;
};

}  // namespace

std::unique_ptr<ReferenceRule> make_reference_rule(const ConfigNode& declaration, const ConfigNode& options) {
  std::string rule = declaration.require<std::string>("rule", "reference rule the plugin implements");
  if (rule != "adamw" && rule != "lion" && rule != "sgd" && rule != "muon") {
    declaration.fail("rule", "expected one of {adamw, lion, sgd, muon}, got \"" + rule + "\"");
  }
  if (rule == "adamw") return std::make_unique<AdamWRule>(options);
  if (rule == "muon") return std::make_unique<MuonRule>(options);
  if (rule == "lion") return std::make_unique<LionRule>(options);
  return std::make_unique<SgdRule>(options);
}

}  // namespace titan::conformance
