// A plugin descriptor that claims it was built against another LibTorch.
#include "test_plugin.hpp"

const titan::PluginDescriptor* titan_test_plugin_wrong_torch(const char* name);
const titan::PluginDescriptor* titan_test_plugin_wrong_torch(const char* name) {
  static const titan::PluginDescriptor descriptor{titan::kPluginAbiVersion, name, "1.0", "0.4.1",
                                                  titan::kind_model, "built for another LibTorch", nullptr};
  return &descriptor;
}
