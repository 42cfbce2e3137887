// The reference optimizer rules in float64, state kept per parameter index.
#include "reference_rules.h"

#include <ATen/ATen.h>

#include <cmath>

namespace titan::conformance {

namespace {

// torch.optim.AdamW: decoupled decay, bias-corrected moments.
class AdamWRule : public ReferenceRule {
 public:
  explicit AdamWRule(const ConfigNode& o)
      : beta1_(o.require<double>("beta1")), beta2_(o.require<double>("beta2")), eps_(o.require<double>("eps")),
        weight_decay_(o.require<double>("weight_decay")) {}
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

}  // namespace

std::unique_ptr<ReferenceRule> make_reference_rule(const ConfigNode& declaration, const ConfigNode& options) {
  std::string rule = declaration.require<std::string>("rule", "reference rule the plugin implements");
  if (rule != "adamw" && rule != "lion" && rule != "sgd") {
    declaration.fail("rule", "expected one of {adamw, lion, sgd}, got \"" + rule + "\"");
  }
  if (rule == "adamw") return std::make_unique<AdamWRule>(options);
  if (rule == "lion") return std::make_unique<LionRule>(options);
  return std::make_unique<SgdRule>(options);
}

}  // namespace titan::conformance
