// A plugin whose registration callback throws.
#include <stdexcept>

#include "titan/plugin.hpp"

namespace {
void register_throwing(titan::PluginRegistrar&) { throw std::runtime_error("registration exploded"); }
}  // namespace

TITAN_PLUGIN(TITAN_PLUGIN_NAME, "1.0", titan::kind_model, "registration throws", register_throwing)
