// A plugin descriptor that claims an ABI version the host does not speak.
#include "titan/plugin.hpp"

extern "C" __attribute__((visibility("default"))) const titan::PluginDescriptor* titan_plugin_descriptor() {
  static const titan::PluginDescriptor descriptor{titan::kPluginAbiVersion + 41, "wrong_abi", "1.0",
                                                  titan::torch_version_string(), titan::kind_model,
                                                  "built for another ABI", nullptr};
  return &descriptor;
}
