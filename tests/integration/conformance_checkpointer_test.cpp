// titan-conformance on checkpointers: dcp passes every check on 1, 2 and 4
// Gloo ranks (round trip, reshard, async, damaged files refused); a
// checkpointer without checksums fails corrupt_flip by name; bad options
// are errors naming the key.
#include "doctest_torch.hpp"

#include "conformance_report.hpp"

namespace fs = std::filesystem;
using namespace titan::test::conformance;

TEST_CASE("titan-conformance: dcp loads bit for bit on 1/2/4 ranks, reshards, saves async and refuses damage") {
  Report report = conformance_json(plugin_dir() / "libtitan_plugin_dcp.so", "--ranks 1,2,4");
  check_all_pass(report, {"checkpointer.save@1", "checkpointer.round_trip@1", "checkpointer.values@1",
                          "checkpointer.rank_local@1", "checkpointer.round_trip@2", "checkpointer.round_trip@4",
                          "checkpointer.values@4", "checkpointer.rank_local@4", "checkpointer.reshard@4->1",
                          "checkpointer.reshard@4->2", "checkpointer.reshard_ddp@4->2",
                          "checkpointer.reshard_hsdp@4->4", "checkpointer.async_save@4",
                          "checkpointer.corrupt_flip@1", "checkpointer.corrupt_truncate@1",
                          "checkpointer.corrupt_delete@1"});
  for (const auto& [name, result] : report.results) CHECK_MESSAGE(result == "pass", name);
}

TEST_CASE("titan-conformance: a checkpointer without checksums fails corrupt_flip by name, and passes "
          "the short and missing files it refuses") {
  Report report = conformance_json(test_plugin("raw_bytes_checkpointer"), "--ranks 1");
  INFO(report.output);
  CHECK(report.exit_code == 1);
  CHECK(report.output.find("conformance check failed: checkpointer.corrupt_flip@1") != std::string::npos);
  CHECK(report.results["checkpointer.corrupt_flip@1"] == "fail");
  CHECK(report.results["checkpointer.corrupt_truncate@1"] == "pass");
  CHECK(report.results["checkpointer.corrupt_delete@1"] == "pass");
  CHECK(report.results["checkpointer.round_trip@1"] == "pass");
  CHECK(report.results["checkpointer.async_save"] == "skip");  // it declares no async_options
}

TEST_CASE("titan-conformance: a checkpointer declaration with a bad option or without its section is an error "
          "naming it") {
  fs::path dir = titan::test::temp_dir("conformance_checkpointer_bad");
  titan::test::write_file(dir / "interval.yaml", "checkpointer:\n  options: {enable: true, interval: 0}\n");
  Report interval = conformance_json(plugin_dir() / "libtitan_plugin_dcp.so", "--declare " + (dir / "interval.yaml").string());
  INFO(interval.output);
  CHECK(interval.exit_code == 2);
  CHECK(interval.output.find("interval") != std::string::npos);

  titan::test::write_file(dir / "async.yaml", "checkpointer:\n  options: {enable: true}\n  async_options: {async_mode: later}\n");
  Report async = conformance_json(plugin_dir() / "libtitan_plugin_dcp.so", "--declare " + (dir / "async.yaml").string());
  INFO(async.output);
  CHECK(async.exit_code == 2);
  CHECK(async.output.find("async_mode") != std::string::npos);

  titan::test::write_file(dir / "none.yaml", "{}\n");
  Report none = conformance_json(plugin_dir() / "libtitan_plugin_dcp.so", "--declare " + (dir / "none.yaml").string());
  INFO(none.output);
  CHECK(none.exit_code == 1);
  CHECK(none.results["checkpointer.declaration"] == "fail");
}
