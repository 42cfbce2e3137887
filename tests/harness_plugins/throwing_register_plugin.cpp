// A plugin whose registration callback throws.
#include <stdexcept>

#include "test_plugin.hpp"

namespace {
void register_throwing_registration(titan::PluginRegistrar&) { throw std::runtime_error("registration exploded"); }
}  // namespace

TITAN_TEST_PLUGIN(throwing_register, "1.0", titan::kind_model, "registration throws", register_throwing_registration)
