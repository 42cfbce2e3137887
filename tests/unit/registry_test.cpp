// Plugin registry: real plugin libraries of this build, and deliberately
// broken ones, each refused with a message naming the problem.
#include "doctest_torch.hpp"

#include "test_support.hpp"
#include "titan/metrics_sink.hpp"
#include "titan/parallelizer.hpp"
#include "titan/registry.hpp"
#include "titan/run_spec.hpp"

using titan::PluginRegistry;

namespace {

std::string test_plugin_dir() {
  return titan::test::env_or("TITAN_TEST_PLUGIN_DIR", titan::test::paths::test_plugin_dir);
}

std::string load_error(const std::string& name_or_path) {
  try {
    PluginRegistry::instance().load(name_or_path);
  } catch (const titan::Error& error) {
    return error.what();
  }
  return "<loaded>";
}

titan::PluginContext context_from(const std::string& yaml) {
  titan::PluginContext context;
  context.options = titan::ConfigNode::parse(yaml, "test.yaml");
  return context;
}

}  // namespace

TEST_SUITE("registry") {
  TEST_CASE("the build tree's plugins are found and load with their kinds") {
    auto names = PluginRegistry::instance().available();
    for (const char* expected : {"llama3", "adamw", "lr_schedules", "dcp"}) {
      CHECK_MESSAGE(std::find(names.begin(), names.end(), expected) != names.end(), expected);
    }
    const auto& llama = PluginRegistry::instance().load("llama3");
    CHECK(llama.kinds == titan::kind_model);
    CHECK(llama.torch_version == titan::torch_version_string());
    CHECK(PluginRegistry::instance().load("dcp").kinds == titan::kind_checkpointer);
  }

  TEST_CASE("an unknown plugin lists the known ones and the closest spelling") {
    std::string message = load_error("lama3");
    CHECK(message.find("plugin 'lama3' not found in [") == 0);
    CHECK(message.find("did you mean 'llama3'?") != std::string::npos);
    CHECK(message.find("known: ") != std::string::npos);
    CHECK(message.find("adamw") != std::string::npos);
  }

  TEST_CASE("a plugin built for another ABI is refused naming both versions") {
    std::string message = load_error(test_plugin_dir() + "/libtitan_plugin_wrong_abi.so");
    CHECK(message.find("built for Titan plugin ABI " + std::to_string(titan::kPluginAbiVersion + 41)) !=
          std::string::npos);
    CHECK(message.find("this titan uses ABI " + std::to_string(titan::kPluginAbiVersion)) != std::string::npos);
  }

  TEST_CASE("a plugin built against another LibTorch is refused naming both versions") {
    std::string message = load_error(test_plugin_dir() + "/libtitan_plugin_wrong_torch.so");
    CHECK(message.find("built against LibTorch 0.4.1") != std::string::npos);
    CHECK(message.find(std::string("titan runs LibTorch ") + titan::torch_version_string()) != std::string::npos);
  }

  TEST_CASE("a library without a descriptor is not a Titan plugin") {
    std::string message = load_error(test_plugin_dir() + "/libtitan_plugin_no_descriptor.so");
    CHECK(message.find("is not a Titan plugin") != std::string::npos);
    CHECK(message.find("titan_plugin_descriptor") != std::string::npos);
  }

  TEST_CASE("a file that is not a library cannot be loaded") {
    std::string message = load_error(test_plugin_dir() + "/libtitan_plugin_not_elf.so");
    CHECK(message.find("cannot be loaded") != std::string::npos);
  }

  TEST_CASE("a throwing registration and a throwing factory are named") {
    CHECK(load_error(test_plugin_dir() + "/libtitan_plugin_throwing_register.so")
              .find("plugin 'throwing_register' failed while registering its factories: registration exploded") !=
          std::string::npos);
    PluginRegistry::instance().load(test_plugin_dir() + "/libtitan_plugin_throwing_factory.so");
    try {
      PluginRegistry::instance().create_metrics_sink("throwing_factory", context_from("{}"));
      FAIL("expected an error");
    } catch (const titan::Error& error) {
      CHECK(std::string(error.what()) ==
            "plugin 'throwing_factory' failed to create its metrics_sink: the disk is full (simulated)");
    }
  }

  TEST_CASE("asking a plugin for a kind it does not provide is an error") {
    try {
      PluginRegistry::instance().create_optimizer("llama3", context_from("{}"));
      FAIL("expected an error");
    } catch (const titan::Error& error) {
      CHECK(std::string(error.what()).find("provides no optimizer (it provides: model)") != std::string::npos);
    }
  }

  TEST_CASE("a working test plugin creates objects that work, from a search dir") {
    PluginRegistry::instance().add_search_dir(test_plugin_dir());
    auto dir = titan::test::temp_dir("registry_echo");
    auto sink = PluginRegistry::instance().create_metrics_sink(
        "echo", context_from("path: " + (dir / "out.txt").string() + "\n"));
    sink->write(3, {{"loss", 1.5}});
    CHECK(titan::test::read_file(dir / "out.txt") == "3 loss 1.5\n");
  }

  TEST_CASE("plugins are applied in canonical order whatever the user's order") {
    PluginRegistry::instance().add_search_dir(test_plugin_dir());
    std::vector<titan::NamedParallelizer> list;
    for (int place : {6, 0, 4, 2, 6, 3}) {
      list.push_back({"echo" + std::to_string(list.size()),
                      PluginRegistry::instance().create_parallelizer(
                          "echo", context_from("apply_order: " + std::to_string(place) + "\n"))});
    }
    titan::sort_canonical(list);
    std::vector<std::string> order;
    for (const auto& item : list) order.push_back(item.plugin);
    CHECK(order == std::vector<std::string>{"echo1", "echo3", "echo5", "echo2", "echo0", "echo4"});
  }
}
