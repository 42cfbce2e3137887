// titan-conformance on real plugins: the project's adamw passes, a plugin
// with a sign error fails naming the check, bad input is a clear error, and
// --json is machine-readable.
#include "doctest_torch.hpp"

#include <nlohmann/json.hpp>

#include "test_support.hpp"

namespace fs = std::filesystem;
using titan::test::run_command;

namespace {

// Built beside titan (<build>/bin).
std::string conformance_binary() {
  return titan::test::env_or("TITAN_CONFORMANCE",
                             (fs::path(titan::test::titan_binary()).parent_path() / "titan-conformance").string());
}

fs::path plugin_dir() { return fs::path(titan::test::titan_binary()).parent_path().parent_path() / "plugins"; }

titan::test::CommandResult conformance(const std::string& args) {
  return run_command(conformance_binary() + " " + args);
}

}  // namespace

TEST_CASE("titan-conformance: adamw matches its declared float64 AdamW reference and passes every check") {
  auto result = conformance("--plugin " + (plugin_dir() / "libtitan_plugin_adamw.so").string());
  INFO(result.output);
  CHECK(result.exit_code == 0);
  CHECK(result.output.find("optimizer.reference_step         PASS") != std::string::npos);
  CHECK(result.output.find("FAIL") == std::string::npos);
}

TEST_CASE("titan-conformance: an optimizer with a sign error fails the reference check by name") {
  auto result = conformance("--plugin " + std::string(titan::test::paths::test_plugin_dir) +
                            "/libtitan_plugin_sign_error_sgd.so --json");
  INFO(result.output);
  CHECK(result.exit_code == 1);
  CHECK(result.output.find("conformance check failed: optimizer.reference_step") != std::string::npos);
  auto json = nlohmann::json::parse(result.output.substr(0, result.output.find("conformance check failed")));
  CHECK(json["passed"] == false);
  for (const auto& check : json["checks"]) {
    if (check["name"] == "optimizer.reference_step") {
      CHECK(check["result"] == "fail");
      CHECK(check["measured"].get<double>() > 0.1);
    }
  }
}

TEST_CASE("titan-conformance: a declaration naming an unknown rule or a missing file is an error naming it") {
  fs::path dir = titan::test::temp_dir("conformance_bad");
  titan::test::write_file(dir / "bad.yaml", "optimizer:\n  rule: adam\n  options: {lr: 0.1}\n");
  auto bad_rule = conformance("--plugin " + (plugin_dir() / "libtitan_plugin_adamw.so").string() + " --declare " +
                              (dir / "bad.yaml").string());
  INFO(bad_rule.output);
  CHECK(bad_rule.exit_code == 2);
  CHECK(bad_rule.output.find("optimizer.rule") != std::string::npos);
  auto missing = conformance("--plugin " + (plugin_dir() / "libtitan_plugin_adamw.so").string() + " --declare " +
                             (dir / "absent.yaml").string());
  INFO(missing.output);
  CHECK(missing.exit_code == 2);
  CHECK(missing.output.find("absent.yaml") != std::string::npos);
}
