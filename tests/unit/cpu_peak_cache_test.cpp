// The CPU's peak behind MFU, measured once per machine: the first run
// measures and keeps it under TITAN_CACHE_DIR, later runs read it, a
// damaged file is measured over, and one measured on a busy machine is
// measured again when the machine is quiet.
#include "doctest_torch.hpp"

#include <cstdlib>
#include <optional>
#include <string>
#include <nlohmann/json.hpp>

#include "test_support.hpp"
#include "train/step_metrics.hpp"

namespace {

// TITAN_CACHE_DIR pointed at a fresh folder for one test case.
class CacheDirScope {
 public:
  explicit CacheDirScope(const std::filesystem::path& dir) : dir_(dir) {
    if (const char* before = std::getenv("TITAN_CACHE_DIR")) before_ = before;
    std::filesystem::remove_all(dir_);
    setenv("TITAN_CACHE_DIR", dir_.c_str(), 1);
  }
  ~CacheDirScope() {
    if (before_) {
      setenv("TITAN_CACHE_DIR", before_->c_str(), 1);
    } else {
      unsetenv("TITAN_CACHE_DIR");
    }
  }
  std::filesystem::path file() const { return dir_ / "cpu_peak_flops.json"; }

 private:
  std::filesystem::path dir_;
  std::optional<std::string> before_;
};

}  // namespace

TEST_CASE("the CPU's peak FLOP/s is measured once and then read from the cache folder") {
  CacheDirScope cache(titan::test::temp_dir("cpu_peak_cache"));
  CHECK(titan::titan_cache_dir() == cache.file().parent_path());

  const titan::CpuPeak first = titan::cpu_peak_flops();
  CHECK(first.flops > 1e8);  // any CPU this runs on does more than 0.1 GFLOP/s
  CHECK(first.source.find("measured at this run's start") != std::string::npos);
  REQUIRE(std::filesystem::exists(cache.file()));
  auto json = nlohmann::json::parse(titan::test::read_file(cache.file()));
  REQUIRE(json.size() == 1);
  const std::string key = json.begin().key();
  CHECK(key.find("threads") != std::string::npos);
  CHECK(json[key]["flops"].get<double>() == first.flops);

  CHECK(json[key]["busy"].is_number_integer());  // the other tasks running while it was measured

  // A kept value measured on a quiet machine is used as it is (here one no
  // matmul would measure).
  json[key]["flops"] = 12345.0;
  json[key]["measured"] = "2026-01-02";
  json[key]["busy"] = 0;
  titan::test::write_file(cache.file(), json.dump());
  const titan::CpuPeak kept = titan::cpu_peak_flops();
  CHECK(kept.flops == 12345.0);
  CHECK(kept.source.find("measured on 2026-01-02, kept in " + cache.file().string()) != std::string::npos);

  // A damaged file is measured over and rewritten.
  titan::test::write_file(cache.file(), "{not json");
  const titan::CpuPeak again = titan::cpu_peak_flops();
  CHECK(again.flops > 1e8);
  CHECK(nlohmann::json::parse(titan::test::read_file(cache.file())).contains(key));
}

TEST_CASE("a CPU peak measured beside other running tasks is measured again once the machine is quiet") {
  // Measured while others ran, or with no record of it (a file from before
  // the record): measured again on a quiet machine, not on a busy one.
  CHECK(titan::cpu_peak_measure_again(3, 0));
  CHECK(titan::cpu_peak_measure_again(std::nullopt, 0));
  CHECK_FALSE(titan::cpu_peak_measure_again(3, 1));
  CHECK_FALSE(titan::cpu_peak_measure_again(std::nullopt, 2));
  // Measured on a quiet machine: kept for good.
  CHECK_FALSE(titan::cpu_peak_measure_again(0, 0));
  CHECK_FALSE(titan::cpu_peak_measure_again(0, 4));
  // /proc/loadavg unreadable (-1): never measured again for it.
  CHECK_FALSE(titan::cpu_peak_measure_again(3, -1));
}
