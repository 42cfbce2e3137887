// FSDP over a slow link: the first measurement of Titan's
// communication/computation overlap (issue 30, item 4). Two hosts (network
// namespaces on a bridge, tests/integration/netns_hosts.hpp) run the llama3
// debug model with FSDP, one rank each, through `titan launch --nnodes 2`, as
// two machines would. Each link is limited by a token bucket filter (tc tbf,
// both ends of every veth, so each direction runs at the rate); per rate and
// with FSDP's prefetch on and off it reports:
//   step     the median seconds per step (metrics.jsonl time_metrics/end_to_end(s),
//            rank 0, the first steps left out)
//   bytes    bytes a host sends per step: the difference of eth0's tx counter
//            over two run lengths on the unlimited link (Gloo's framing and
//            TCP headers included), the larger host
//   link     bytes / rate: the time the link alone needs per step
//   exposed  step - the step on the unlimited link with the same prefetch
//   overlap  1 - exposed / link: the share of the link time hidden under compute
//            (at most unlimited step / link: only compute can hide it, and the
//            first all-gather, the last reduce-scatter and the optimizer never
//            overlap anything, so a link slower than compute gives overlap < 0)
// Delay cannot be emulated: this machine's kernel has no netem qdisc, so
// the link is a rate only (tbf queues, it never adds a fixed latency).
// Run as root (namespaces); prints a reason and exits 0 where they cannot be
// made. Usage: titan_bench_slow_link [repeats (3)] [steps (6)] [rates in Mbit/s, comma-separated (0=unlimited,1000,200,50)]
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "netns_hosts.hpp"

namespace {

namespace fs = std::filesystem;
using titan::test::NetnsHosts;
using titan::test::run_command;

constexpr int kSkippedSteps = 2;  // the first steps build buffers and warm caches

std::string train(const fs::path& dump, int steps, bool prefetch) {
  return titan::test::titan_binary() + " train " + titan::test::source_dir() +
         "/configs/llama3_debugmodel.yaml --set training.local_batch_size=8 --set training.seq_len=128"
         " --set training.threads=1 --set metrics.log_freq=1 --set comm.init_timeout_seconds=120"
         " --set training.steps=" + std::to_string(steps) +
         " --set 'plugins=[{name: fsdp, prefetch: " + (prefetch ? "true" : "false") + "}]'" +
         " --set job.dump_folder=" + dump.string();
}

std::string on_node(const NetnsHosts& hosts, int node, const std::string& command) {
  return titan::test::titan_binary() + " launch --nnodes 2 --node-rank " + std::to_string(node) +
         " --nproc-per-node 1 --master-addr " + hosts.address(0) + " --master-port 29500 --grace-period-s 5 -- " +
         command;
}

// The rate on both ends of every host's veth (0: none).
void limit_links(const NetnsHosts& hosts, int64_t mbit, const std::string& switch_ns) {
  for (int host = 0; host < hosts.size(); ++host) {
    std::vector<std::string> ends{"ip netns exec " + hosts.name(host) + " tc qdisc", "ip netns exec " + switch_ns +
                                                                                         " tc qdisc"};
    std::vector<std::string> devices{"eth0", "p" + std::to_string(host)};
    for (size_t e = 0; e < ends.size(); ++e) {
      run_command(ends[e] + " del dev " + devices[e] + " root 2>/dev/null");
      if (mbit == 0) continue;
      // A burst of 10 ms at the rate (at least 64 KB: tbf needs rate / HZ).
      int64_t burst = std::max<int64_t>(64 * 1024, mbit * 1000 * 1000 / 8 / 100);
      auto added = run_command(ends[e] + " add dev " + devices[e] + " root tbf rate " + std::to_string(mbit) +
                               "mbit burst " + std::to_string(burst) + " latency 200ms 2>&1");
      if (added.exit_code != 0) throw std::runtime_error("tc tbf on " + devices[e] + ": " + added.output);
    }
  }
}

int64_t tx_bytes(const NetnsHosts& hosts, int host) {
  auto out = run_command(hosts.exec(host) + "cat /sys/class/net/eth0/statistics/tx_bytes");
  return std::stoll(out.output);
}

struct Run {
  double step_s = 0;
  int64_t max_tx = 0;  // bytes the busier host sent over the whole run
};

Run run_job(const NetnsHosts& hosts, int steps, bool prefetch, const fs::path& root) {
  fs::path dump = root / "dump";
  fs::remove_all(dump);
  std::vector<int64_t> before{tx_bytes(hosts, 0), tx_bytes(hosts, 1)};
  std::vector<std::string> commands{on_node(hosts, 0, train(dump, steps, prefetch)),
                                    on_node(hosts, 1, train(dump, steps, prefetch))};
  auto results = hosts.run_all(commands, 600, root / "logs");
  for (int host = 0; host < 2; ++host) {
    if (results[host].exit_code != 0) {
      throw std::runtime_error("host " + std::to_string(host) + " failed:\n" + results[host].output);
    }
  }
  Run run;
  run.max_tx = std::max(tx_bytes(hosts, 0) - before[0], tx_bytes(hosts, 1) - before[1]);
  std::vector<double> times;
  std::istringstream lines(titan::test::read_file(dump / "metrics.jsonl"));
  for (std::string line; std::getline(lines, line);) {
    auto record = nlohmann::json::parse(line);
    if (record.contains("time_metrics/end_to_end(s)") && record["step"].get<int>() > kSkippedSteps) {
      times.push_back(record["time_metrics/end_to_end(s)"].get<double>());
    }
  }
  if (times.empty()) throw std::runtime_error("no step times in " + (dump / "metrics.jsonl").string());
  std::sort(times.begin(), times.end());
  run.step_s = times[times.size() / 2];
  return run;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

std::vector<int64_t> parse_rates(const std::string& text) {
  std::vector<int64_t> rates;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ',');) rates.push_back(std::stoll(part));
  if (rates.empty() || rates.front() != 0) rates.insert(rates.begin(), 0);  // the baseline
  return rates;
}

std::string rate_name(int64_t mbit) {
  if (mbit == 0) return "unlimited";
  if (mbit % 1000 == 0) return std::to_string(mbit / 1000) + " Gbit/s";
  return std::to_string(mbit) + " Mbit/s";
}

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 3;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 6;
  const std::vector<int64_t> rates = parse_rates(argc > 3 ? argv[3] : "0,1000,200,50");
  if (repeats < 1 || steps <= kSkippedSteps + 1) {
    std::fprintf(stderr, "usage: titan_bench_slow_link [repeats >= 1] [steps > %d] [Mbit/s,...]\n", kSkippedSteps + 1);
    return 2;
  }
  NetnsHosts hosts(2, "slowlink");
  if (!hosts.made()) {
    std::printf("skipped: %s\n", hosts.reason().c_str());
    return 0;
  }
  if (run_command("command -v tc").exit_code != 0) {
    std::printf("skipped: tc (iproute2) is not installed\n");
    return 0;
  }
  auto busy = run_command("pgrep -c cc1plus");
  if (std::atoi(busy.output.c_str()) > 0) {
    std::printf("warning: %d compilers are running; the times below share the CPU with them\n",
                std::atoi(busy.output.c_str()));
  }
  // The bridge's namespace: the other end of each host's cable.
  const std::string switch_ns = hosts.name(0).substr(0, hosts.name(0).size() - 3) + "-sw";
  const fs::path root = titan::test::temp_dir("bench_slow_link");

  // Bytes per step: two run lengths on the unlimited link cancel start-up.
  limit_links(hosts, 0, switch_ns);
  const int short_steps = kSkippedSteps + 1;
  Run longer = run_job(hosts, steps, true, root);
  Run shorter = run_job(hosts, short_steps, true, root);
  const double bytes = static_cast<double>(longer.max_tx - shorter.max_tx) / (steps - short_steps);
  std::printf("bytes a host sends per step: %.1f MB (tx over %d vs %d steps)\n", bytes / 1e6, steps, short_steps);

  std::map<std::pair<int64_t, bool>, std::vector<double>> times;
  for (int r = 0; r < repeats; ++r) {
    for (int64_t mbit : rates) {
      limit_links(hosts, mbit, switch_ns);
      for (bool prefetch : {true, false}) {
        Run run = run_job(hosts, steps, prefetch, root);
        times[{mbit, prefetch}].push_back(run.step_s);
        std::printf("  repeat %d, %s, prefetch %s: %.3f s/step\n", r + 1, rate_name(mbit).c_str(),
                    prefetch ? "on" : "off", run.step_s);
        std::fflush(stdout);
      }
    }
  }
  limit_links(hosts, 0, switch_ns);

  std::printf("\nFSDP, llama3 debugmodel, 2 hosts x 1 rank, %.1f MB per host per step, median of %d\n", bytes / 1e6,
              repeats);
  std::printf("| link | prefetch | step (s) | link time (s) | exposed comm (s) | overlap | step / unlimited |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (int64_t mbit : rates) {
    for (bool prefetch : {true, false}) {
      double step = median(times[{mbit, prefetch}]);
      double base = median(times[{0, prefetch}]);
      if (mbit == 0) {
        std::printf("| %s | %s | %.3f | - | - | - | 1.00 |\n", rate_name(mbit).c_str(), prefetch ? "on" : "off", step);
        continue;
      }
      double link = bytes * 8 / (static_cast<double>(mbit) * 1e6);
      double exposed = step - base;
      std::printf("| %s | %s | %.3f | %.3f | %.3f | %.0f%% | %.2f |\n", rate_name(mbit).c_str(),
                  prefetch ? "on" : "off", step, link, exposed, 100.0 * (1.0 - exposed / link), step / base);
    }
  }
  std::printf("\nratios (prefetch off / on) of step time:");
  for (int64_t mbit : rates) {
    std::printf(" %s %.2f;", rate_name(mbit).c_str(), median(times[{mbit, false}]) / median(times[{mbit, true}]));
  }
  std::printf("\n");
  return 0;
}
