// A plugin descriptor that claims an ABI version the host does not speak.
#include "test_plugin.hpp"

const titan::PluginDescriptor* titan_test_plugin_wrong_abi(const char* name);
const titan::PluginDescriptor* titan_test_plugin_wrong_abi(const char* name) {
  static const titan::PluginDescriptor descriptor{titan::kPluginAbiVersion + 41, name, "1.0",
                                                  titan::torch_version_string(), titan::kind_model,
                                                  "built for another ABI", nullptr};
  return &descriptor;
}
