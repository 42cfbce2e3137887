// The small standalone test plugins are compiled once, together, and linked
// whole into every one of their libraries: what makes a library one plugin is
// a generated file of one line (CMakeLists.txt) exporting
// titan_plugin_descriptor as test plugin ID's descriptor, under the
// library's name. One compile instead of one per plugin (each paid for the
// precompiled header).
#pragma once
#include "titan/plugin.hpp"

// Defines titan_test_plugin_ID(name): the descriptor of test plugin ID, named
// as the library that exports it names it.
#define TITAN_TEST_PLUGIN(ID, VERSION, KINDS, SUMMARY, REGISTER_FN)                  \
  const ::titan::PluginDescriptor* titan_test_plugin_##ID(const char* name);          \
  const ::titan::PluginDescriptor* titan_test_plugin_##ID(const char* name) {         \
    static const ::titan::PluginDescriptor descriptor{                                \
        ::titan::kPluginAbiVersion, name, VERSION, ::titan::torch_version_string(),   \
        static_cast<uint32_t>(KINDS), SUMMARY, REGISTER_FN};                          \
    return &descriptor;                                                               \
  }

// The same for a plugin of one kind (TITAN_PLUGIN_OF's arguments after ID).
#define TITAN_TEST_PLUGIN_OF(ID, KIND, TYPE, VERSION, SUMMARY, ...)                \
  static void titan_register_##ID(::titan::PluginRegistrar& registrar) {          \
    registrar.KIND(::titan::make_factory<TYPE>(__VA_ARGS__));                      \
  }                                                                                \
  TITAN_TEST_PLUGIN(ID, VERSION, ::titan::kind_##KIND, SUMMARY, titan_register_##ID)
