// Hosts for multi-machine tests: N network namespaces, each with one eth0
// (10.231.0.(i+1)/24) on a bridge in a "switch" namespace, so jobs really
// cross a network and no address outside the test's namespaces is used.
// Inside them the hosts are also named node0, node1, ... (`ip netns exec`
// mounts /etc/netns/NAME/hosts, a copy of /etc/hosts plus those names, over
// /etc/hosts).
// Names carry the test process's PID, so parallel tests never collide and a
// later run deletes what a killed one left; the destructor deletes them
// even when a REQUIRE fails. Where namespaces cannot be made (not root, no
// iproute2) reason() says why and the test reports TITAN_SKIPPED.
#pragma once
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <sstream>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace titan::test {

class NetnsHosts {
 public:
  NetnsHosts(int hosts, const std::string& tag) {
    delete_leftovers();
    std::string prefix = "titan-" + std::to_string(getpid()) + "-" + tag;
    switch_ = prefix + "-sw";
    for (int i = 0; i < hosts; ++i) names_.push_back(prefix + "-h" + std::to_string(i));
    std::string script = "set -e; ip netns add " + switch_ + "; ip -n " + switch_ + " link add br0 type bridge; ip -n " +
                         switch_ + " link set br0 up; ";
    for (int i = 0; i < hosts; ++i) {
      const std::string& host = names_[i];
      std::string port = "p" + std::to_string(i);
      script += "ip netns add " + host + "; ip -n " + switch_ + " link add " + port + " type veth peer name eth0 netns " +
                host + "; ip -n " + switch_ + " link set " + port + " master br0 up; ip -n " + host + " addr add " +
                address(i) + "/24 dev eth0; ip -n " + host + " link set eth0 up; ip -n " + host + " link set lo up; ";
    }
    // The machine's own names stay (torchrun resolves its host name).
    std::string nodes;
    for (int i = 0; i < hosts; ++i) nodes += address(i) + " node" + std::to_string(i) + "\n";
    for (const auto& host : names_) {
      script += "mkdir -p /etc/netns/" + host + "; { cat /etc/hosts; printf '" + nodes + "'; } > /etc/netns/" + host +
                "/hosts; ";
    }
    auto made = run_command("(" + script + ")");
    if (made.exit_code != 0) {
      reason_ = "network namespaces cannot be made here (" + trim(made.output) + "); the multi-host tests need root and iproute2";
    }
  }
  ~NetnsHosts() { remove(); }
  NetnsHosts(const NetnsHosts&) = delete;
  NetnsHosts& operator=(const NetnsHosts&) = delete;

  bool made() const { return reason_.empty(); }
  const std::string& reason() const { return reason_; }
  int size() const { return static_cast<int>(names_.size()); }
  std::string address(int host) const { return "10.231.0." + std::to_string(host + 1); }
  const std::string& name(int host) const { return names_.at(host); }
  // Prefix a command line with this to run it on `host`.
  std::string exec(int host) const { return "ip netns exec " + names_.at(host) + " "; }
  // The host's cable: down, the host is cut off from the others.
  void set_link(int host, bool up) const {
    run_command("ip -n " + switch_ + " link set p" + std::to_string(host) + (up ? " up" : " down"));
  }

  // Runs command i on host i, all at once, each under `timeout_s`; the
  // results in host order.
  std::vector<CommandResult> run_all(const std::vector<std::string>& commands, int timeout_s,
                                     const std::filesystem::path& logs) const {
    std::filesystem::create_directories(logs);
    std::string script;
    for (size_t i = 0; i < commands.size(); ++i) {
      std::string out = (logs / ("host" + std::to_string(i) + ".log")).string();
      script += "(" + exec(static_cast<int>(i)) + "timeout -k 5 " + std::to_string(timeout_s) + " sh -c " +
                quoted(commands[i]) + " > " + out + " 2>&1; echo $? > " + out + ".rc) & ";
    }
    run_command(script + "wait");
    std::vector<CommandResult> results;
    for (size_t i = 0; i < commands.size(); ++i) {
      std::string out = (logs / ("host" + std::to_string(i) + ".log")).string();
      std::string rc = read_file(out + ".rc");
      results.push_back({rc.empty() ? -1 : std::stoi(rc), read_file(out)});
    }
    return results;
  }

  static std::string quoted(const std::string& text) {
    std::string out = "'";
    for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
  }

 private:
  void remove() {
    // Deleting a namespace takes its veth ends (and the bridge's) with it.
    for (const auto& name : names_) run_command("ip netns del " + name + "; rm -rf /etc/netns/" + name);
    if (!switch_.empty()) run_command("ip netns del " + switch_);
  }

  // Namespaces named titan-PID-... whose test process is gone (killed by a
  // timeout before its destructor ran).
  static void delete_leftovers() {
    std::istringstream list(run_command("ip netns list 2>/dev/null").output);
    for (std::string line; std::getline(list, line);) {
      std::string name = line.substr(0, line.find(' '));
      if (name.rfind("titan-", 0) != 0) continue;
      pid_t pid = static_cast<pid_t>(std::atol(name.c_str() + 6));
      if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) run_command("ip netns del " + name + "; rm -rf /etc/netns/" + name);
    }
  }

  static std::string trim(std::string text) {
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    return text;
  }

  std::string switch_;
  std::vector<std::string> names_;
  std::string reason_;
};

}  // namespace titan::test
