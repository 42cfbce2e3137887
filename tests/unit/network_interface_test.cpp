// The Gloo interface choice on made-up hosts (interfaces and routes given to
// choose_gloo_network), then on this machine's own. Real hosts in network
// namespaces are in tests/integration/multihost_test.cpp.
#include "doctest_torch.hpp"

#include <string>

#include "test_support.hpp"
#include "titan/error.hpp"
#include "titan/network_interface.hpp"

using titan::choose_gloo_network;
using titan::NetworkChoice;
using titan::NetworkFacts;
using titan::RouteToMaster;

namespace {


// A host with loopback, eth0 on 10.0.0.0/24 and eth1 on 192.168.1.0/24
// (down when `eth1_up` is false); routes go by the master's first octet.
NetworkFacts two_nic_host(bool eth1_up = true) {
  NetworkFacts facts;
  facts.addresses = {{"lo", "127.0.0.1", true},
                     {"lo", "::1", true},
                     {"eth0", "fe80::1", true},
                     {"eth0", "10.0.0.5", true},
                     {"eth1", "192.168.1.7", eth1_up}};
  facts.route = [](const std::string& master, int) {
    std::string resolved = master == "node0" ? "10.0.0.1" : master == "localhost" ? "127.0.0.1" : master;
    if (resolved.rfind("127.", 0) == 0) return RouteToMaster{resolved, "127.0.0.1"};
    if (resolved.rfind("10.", 0) == 0) return RouteToMaster{resolved, "10.0.0.5"};
    if (resolved.rfind("192.168.", 0) == 0) return RouteToMaster{resolved, "192.168.1.7"};
    if (resolved.rfind("172.", 0) == 0) return RouteToMaster{resolved, "172.16.0.9"};  // held by no interface
    throw titan::Error("no route from this host to MASTER_ADDR " + master);
  };
  return facts;
}

std::string interface_error_of(const std::string& ifname, const std::string& master, const NetworkFacts& facts) {
  try {
    choose_gloo_network(ifname, master, 29500, facts);
  } catch (const titan::Error& error) {
    return error.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("network interface: without GLOO_SOCKET_IFNAME the interface whose address routes to MASTER_ADDR") {
  NetworkChoice choice = choose_gloo_network("", "10.0.0.1", 29500, two_nic_host());
  REQUIRE(choice.endpoints.size() == 1);
  CHECK(choice.endpoints[0].interface == "eth0");
  CHECK(choice.endpoints[0].address == "10.0.0.5");
  CHECK_FALSE(choice.endpoints[0].by_name);
  CHECK(titan::test::has(choice.reason, "routes to MASTER_ADDR 10.0.0.1"));
  // Another master, another interface: the choice follows the route.
  choice = choose_gloo_network("", "192.168.1.1", 29500, two_nic_host());
  CHECK(choice.describe() == "interface eth1 (192.168.1.7)");
  // A host name is resolved first and both are named.
  choice = choose_gloo_network("", "node0", 29500, two_nic_host());
  CHECK(choice.endpoints[0].interface == "eth0");
  CHECK(titan::test::has(choice.reason, "MASTER_ADDR node0 (10.0.0.1)"));
}

TEST_CASE("network interface: a loopback MASTER_ADDR gives loopback, any other never does") {
  for (const char* master : {"127.0.0.1", "localhost"}) {
    NetworkChoice choice = choose_gloo_network("", master, 29500, two_nic_host());
    CHECK(choice.describe() == "interface lo (127.0.0.1)");
    CHECK(titan::test::has(choice.reason, "loopback"));
  }
  NetworkFacts odd = two_nic_host();
  odd.route = [](const std::string& master, int) { return RouteToMaster{master, "127.0.0.1"}; };
  std::string error = interface_error_of("", "10.0.0.1", odd);
  CHECK_MESSAGE(titan::test::has(error, "MASTER_ADDR 10.0.0.1 is not a loopback address but is reached through lo"), error);
  CHECK(titan::test::has(error, "GLOO_SOCKET_IFNAME"));
}

TEST_CASE("network interface: GLOO_SOCKET_IFNAME's interfaces are used in order, one device each, over the route") {
  NetworkChoice choice = choose_gloo_network("eth1", "10.0.0.1", 29500, two_nic_host());
  REQUIRE(choice.endpoints.size() == 1);
  CHECK(choice.endpoints[0].interface == "eth1");
  CHECK(choice.endpoints[0].by_name);
  CHECK(choice.reason == "GLOO_SOCKET_IFNAME=eth1");
  // IPv4 before IPv6, as Gloo's interface lookup; spaces and empty names ignored.
  choice = choose_gloo_network(" eth1, ,eth0 ", "10.0.0.1", 29500, two_nic_host());
  REQUIRE(choice.endpoints.size() == 2);
  CHECK(choice.describe() == "interfaces eth1 (192.168.1.7), eth0 (10.0.0.5)");
  // Even loopback, when named: the user's word wins, as in PyTorch.
  CHECK(choose_gloo_network("lo", "10.0.0.1", 29500, two_nic_host()).endpoints[0].address == "127.0.0.1");
}

TEST_CASE("network interface: unknown, down or empty interface lists and unroutable masters are refused by name") {
  std::string error = interface_error_of("eth7", "10.0.0.1", two_nic_host());
  CHECK_MESSAGE(titan::test::has(error, "GLOO_SOCKET_IFNAME names interface 'eth7', which this host does not have"), error);
  CHECK(titan::test::has(error, "eth0 (10.0.0.5)"));  // what there is instead
  error = interface_error_of("eth0,eth1", "10.0.0.1", two_nic_host(false));
  CHECK_MESSAGE(titan::test::has(error, "'eth1' (192.168.1.7), which is down"), error);
  error = interface_error_of(",", "10.0.0.1", two_nic_host());
  CHECK_MESSAGE(titan::test::has(error, "GLOO_SOCKET_IFNAME=',' names no interface"), error);
  error = interface_error_of("", "8.8.8.8", two_nic_host());
  CHECK_MESSAGE(titan::test::has(error, "no route from this host to MASTER_ADDR 8.8.8.8"), error);
  error = interface_error_of("", "172.16.0.1", two_nic_host());
  CHECK_MESSAGE(titan::test::has(error, "leaves from 172.16.0.9, which no interface of this host holds"), error);
}

TEST_CASE("network interface: this machine's loopback is listed and routes to itself") {
  NetworkFacts facts = titan::system_network_facts();
  bool has_loopback = false;
  for (const auto& entry : facts.addresses) has_loopback |= entry.address == "127.0.0.1" && entry.up;
  CHECK(has_loopback);
  RouteToMaster route = facts.route("127.0.0.1", 29500);
  CHECK(route.source_address == "127.0.0.1");
  CHECK(choose_gloo_network("", "127.0.0.1", 29500, facts).endpoints.at(0).address == "127.0.0.1");
  std::string error = interface_error_of("", "no-such-host.invalid", facts);
  CHECK_MESSAGE(titan::test::has(error, "MASTER_ADDR no-such-host.invalid does not resolve"), error);
}
