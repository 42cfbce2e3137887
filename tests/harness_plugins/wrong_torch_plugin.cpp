// A plugin descriptor that claims it was built against another LibTorch.
#include "titan/plugin.hpp"

extern "C" __attribute__((visibility("default"))) const titan::PluginDescriptor* titan_plugin_descriptor() {
  static const titan::PluginDescriptor descriptor{titan::kPluginAbiVersion, "wrong_torch", "1.0", "0.4.1",
                                                  titan::kind_model, "built for another LibTorch", nullptr};
  return &descriptor;
}
