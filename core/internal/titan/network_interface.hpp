// Which network interface a rank's Gloo connections use, chosen as PyTorch
// users expect: GLOO_SOCKET_IFNAME's interfaces (comma-separated, one Gloo
// device each), else the one whose address routes to MASTER_ADDR.
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace titan {

// One address of one interface, as getifaddrs reports it.
struct InterfaceAddress {
  std::string interface;
  std::string address;  // numeric, IPv4 or IPv6
  bool up = false;
};

// Where the route to MASTER_ADDR leaves this host.
struct RouteToMaster {
  std::string master_address;  // MASTER_ADDR resolved, numeric
  std::string source_address;  // this host's address on that route
};

// What the host says; the system's by default, injected by tests.
struct NetworkFacts {
  std::vector<InterfaceAddress> addresses;
  // Throws titan::Error naming MASTER_ADDR when it cannot be resolved or routed.
  std::function<RouteToMaster(const std::string& master_addr, int master_port)> route;
};

struct GlooEndpoint {
  std::string interface;
  std::string address;
  bool by_name = false;  // from GLOO_SOCKET_IFNAME: Gloo binds to the interface itself
};

struct NetworkChoice {
  std::vector<GlooEndpoint> endpoints;  // one Gloo device each, in order
  std::string reason;                   // for the log: why these
  // "interface eth0 (10.0.0.2)" or "interfaces eth0 (...), eth1 (...)"
  std::string describe() const;
};

// `gloo_socket_ifname` is GLOO_SOCKET_IFNAME's value ("" when unset). A
// loopback MASTER_ADDR gives loopback; any other never does. Unknown, down
// or address-less interfaces and unroutable masters are titan::Errors that
// say what to set. `target` names master_addr in them (fault tolerance
// routes to its Lighthouse instead).
NetworkChoice choose_gloo_network(const std::string& gloo_socket_ifname, const std::string& master_addr,
                                  int master_port, const NetworkFacts& facts,
                                  const std::string& target = "MASTER_ADDR");

// This host's interfaces (getifaddrs) and routing (a connected UDP socket's
// local address: nothing is sent).
NetworkFacts system_network_facts();

bool is_loopback_address(const std::string& numeric_address);

}  // namespace titan
