// Defaults for the optional model-only hooks: a checkpointer that keeps
// no per-tensor index says so instead of guessing.
#include "titan/checkpointer.hpp"

#include "titan/error.hpp"

namespace titan {

namespace {
[[noreturn]] void unsupported(const std::string& what) {
  throw Error("the configured checkpointer cannot " + what +
              "; use a checkpointer that keeps a per-tensor index (the default one does: leave checkpoint.name unset)");
}
}  // namespace

std::vector<std::string> Checkpointer::model_tensor_names(const std::string& step_dir) const {
  unsupported("list the model tensors of '" + step_dir + "'");
}

at::Tensor Checkpointer::read_model_tensor(const std::string& step_dir, const std::string& name) const {
  unsupported("read model tensor '" + name + "' from '" + step_dir + "'");
}

void Checkpointer::write_model(const std::string& step_dir, const std::map<std::string, at::Tensor>& /*tensors*/,
                               const std::string& /*config_yaml*/) const {
  unsupported("write a model-only checkpoint to '" + step_dir + "'");
}

}  // namespace titan
