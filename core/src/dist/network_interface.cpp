// Choosing the Gloo interface (GLOO_SOCKET_IFNAME, else the route to
// MASTER_ADDR) and reading the host's interfaces and routes. Gloo's own
// default (the host name's address) is 127.0.0.1 in a container or network
// namespace, which makes every rank dial its own loopback.
#include "titan/network_interface.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>

#include "titan/error.hpp"

namespace titan {

namespace {

std::string numeric(const sockaddr* address) {
  char text[INET6_ADDRSTRLEN] = {0};
  if (address->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(address)->sin_addr, text, sizeof(text));
  } else if (address->sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr, text, sizeof(text));
  }
  return text;
}

std::vector<std::string> split_names(const std::string& list) {
  std::vector<std::string> names;
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    std::string name = list.substr(start, comma - start);
    size_t first = name.find_first_not_of(" \t");
    size_t last = name.find_last_not_of(" \t");
    if (first != std::string::npos) names.push_back(name.substr(first, last - first + 1));
    start = comma + 1;
  }
  return names;
}

std::string known_interfaces(const NetworkFacts& facts) {
  std::set<std::string> names;
  for (const auto& entry : facts.addresses) names.insert(entry.interface + " (" + entry.address + ")");
  std::string text;
  for (const auto& name : names) text += (text.empty() ? "" : ", ") + name;
  return text.empty() ? "none with an address" : text;
}

// GLOO_SOCKET_IFNAME's interfaces, each checked to exist, be up and hold an
// address (IPv4 first, as Gloo's lookup of an interface prefers it).
NetworkChoice by_names(const std::string& list, const NetworkFacts& facts) {
  NetworkChoice choice;
  choice.reason = "GLOO_SOCKET_IFNAME=" + list;
  std::vector<std::string> names = split_names(list);
  if (names.empty()) throw Error("GLOO_SOCKET_IFNAME='" + list + "' names no interface; set it to e.g. eth0 or eth0,eth1");
  for (const auto& name : names) {
    const InterfaceAddress* chosen = nullptr;
    for (const auto& entry : facts.addresses) {
      if (entry.interface != name) continue;
      bool ipv4 = entry.address.find(':') == std::string::npos;
      if (!chosen || (ipv4 && chosen->address.find(':') != std::string::npos)) chosen = &entry;
    }
    if (!chosen) {
      throw Error("GLOO_SOCKET_IFNAME names interface '" + name + "', which this host does not have with an address; "
                  "interfaces here: " + known_interfaces(facts));
    }
    if (!chosen->up) {
      throw Error("GLOO_SOCKET_IFNAME names interface '" + name + "' (" + chosen->address +
                  "), which is down; bring it up or name another (interfaces here: " + known_interfaces(facts) + ")");
    }
    choice.endpoints.push_back({name, chosen->address, true});
  }
  return choice;
}

}  // namespace

bool is_loopback_address(const std::string& address) {
  return address.rfind("127.", 0) == 0 || address == "::1" || address.rfind("::ffff:127.", 0) == 0;
}

std::string NetworkChoice::describe() const {
  std::string text = endpoints.size() == 1 ? "interface " : "interfaces ";
  for (size_t i = 0; i < endpoints.size(); ++i) {
    text += (i ? ", " : "") + endpoints[i].interface + " (" + endpoints[i].address + ")";
  }
  return text;
}

NetworkChoice choose_gloo_network(const std::string& gloo_socket_ifname, const std::string& master_addr,
                                  int master_port, const NetworkFacts& facts, const std::string& target) {
  if (!gloo_socket_ifname.empty()) return by_names(gloo_socket_ifname, facts);
  RouteToMaster route = facts.route(master_addr, master_port);
  const InterfaceAddress* holder = nullptr;
  for (const auto& entry : facts.addresses) {
    if (entry.address == route.source_address) holder = &entry;
  }
  std::string to_master = target + " " + master_addr +
                          (route.master_address == master_addr ? "" : " (" + route.master_address + ")");
  if (!holder) {
    throw Error("the route to " + to_master + " leaves from " + route.source_address +
                ", which no interface of this host holds (interfaces here: " + known_interfaces(facts) +
                "); set GLOO_SOCKET_IFNAME to the interface the ranks share");
  }
  if (is_loopback_address(route.source_address) && !is_loopback_address(route.master_address)) {
    throw Error(to_master + " is not a loopback address but is reached through " + holder->interface + " (" +
                route.source_address + "); peers on other hosts could not reach this rank there. "
                "Set GLOO_SOCKET_IFNAME to the interface the ranks share");
  }
  NetworkChoice choice;
  choice.reason = is_loopback_address(route.master_address) ? to_master + " is loopback: a one-host job"
                                                            : "its address routes to " + to_master;
  choice.endpoints.push_back({holder->interface, route.source_address, false});
  return choice;
}

NetworkFacts system_network_facts() {
  NetworkFacts facts;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) throw Error(std::string("listing this host's network interfaces failed: ") + std::strerror(errno));
  for (ifaddrs* entry = list; entry; entry = entry->ifa_next) {
    if (!entry->ifa_addr || (entry->ifa_addr->sa_family != AF_INET && entry->ifa_addr->sa_family != AF_INET6)) {
      continue;
    }
    facts.addresses.push_back({entry->ifa_name, numeric(entry->ifa_addr), (entry->ifa_flags & IFF_UP) != 0});
  }
  freeifaddrs(list);
  facts.route = [](const std::string& master_addr, int master_port) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_DGRAM;
    addrinfo* found = nullptr;
    int status = getaddrinfo(master_addr.c_str(), std::to_string(master_port).c_str(), &hints, &found);
    if (status != 0) {
      throw Error("MASTER_ADDR " + master_addr + " does not resolve: " + gai_strerror(status) +
                  "; set it to rank 0's host name or address");
    }
    RouteToMaster route;
    route.master_address = numeric(found->ai_addr);
    // A UDP connect only asks the kernel for a route; nothing is sent.
    int fd = socket(found->ai_family, SOCK_DGRAM, 0);
    int error = fd < 0 ? errno : 0;
    if (fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) != 0) error = errno;
    sockaddr_storage local{};
    socklen_t length = sizeof(local);
    if (error == 0 && getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) != 0) error = errno;
    if (fd >= 0) close(fd);
    freeaddrinfo(found);
    if (error != 0) {
      std::string resolved = route.master_address == master_addr ? "" : " (" + route.master_address + ")";
      throw Error("no route from this host to MASTER_ADDR " + master_addr + resolved + ": " + std::strerror(error) +
                  "; check MASTER_ADDR, or set GLOO_SOCKET_IFNAME");
    }
    route.source_address = numeric(reinterpret_cast<sockaddr*>(&local));
    return route;
  };
  return facts;
}

}  // namespace titan
