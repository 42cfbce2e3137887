// detect_world: torchrun / titan launch variables, then Slurm's.
#include "titan/world.hpp"

#include <cstdlib>
#include <string>

#include "titan/error.hpp"

namespace titan {

namespace {

class Env {
 public:
  explicit Env(const EnvLookup& lookup) : lookup_(lookup) {}
  bool has(const char* name) const { return get(name) != nullptr; }
  const char* get(const char* name) const {
    const char* value = lookup_ ? lookup_(name) : std::getenv(name);
    return value && *value ? value : nullptr;
  }
  std::string text(const char* name, const std::string& fallback) const {
    const char* value = get(name);
    return value ? value : fallback;
  }
  int number(const char* name, int fallback, int minimum) const {
    const char* value = get(name);
    if (!value) return fallback;
    size_t used = 0;
    int parsed = 0;
    try {
      parsed = std::stoi(value, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    // Slurm writes counts like "4(x2)": the leading number is what we want.
    std::string rest = std::string(value).substr(used);
    if (used == 0 || (!rest.empty() && rest[0] != '(') || parsed < minimum) {
      throw Error(std::string("environment variable ") + name + "='" + value + "' is not an integer >= " +
                  std::to_string(minimum) + "; check how the job was launched");
    }
    return parsed;
  }

 private:
  const EnvLookup& lookup_;
};

void check_rank(const World& world, const char* rank_variable, const char* size_variable) {
  if (world.rank >= world.world_size) {
    throw Error(std::string(rank_variable) + "=" + std::to_string(world.rank) + " is not below " + size_variable +
                "=" + std::to_string(world.world_size));
  }
  if (world.local_rank >= world.local_world_size) {
    throw Error("local rank " + std::to_string(world.local_rank) + " is not below the local world size " +
                std::to_string(world.local_world_size));
  }
}

}  // namespace

std::string first_slurm_host(const std::string& nodelist) {
  // "prefix[01-04,07]suffix,other" -> "prefix01suffix"
  size_t comma = nodelist.find(',');
  size_t bracket = nodelist.find('[');
  if (bracket == std::string::npos || (comma != std::string::npos && comma < bracket)) {
    return nodelist.substr(0, comma);
  }
  size_t close = nodelist.find(']', bracket);
  if (close == std::string::npos) throw Error("SLURM_NODELIST='" + nodelist + "' has an unclosed '['");
  std::string inside = nodelist.substr(bracket + 1, close - bracket - 1);
  std::string first = inside.substr(0, inside.find_first_of(",-"));
  std::string after = nodelist.substr(close + 1);
  return nodelist.substr(0, bracket) + first + after.substr(0, after.find(','));
}

World detect_world(const EnvLookup& lookup) {
  Env env(lookup);
  World world;
  if (env.has("RANK") || env.has("WORLD_SIZE")) {
    if (!env.has("RANK") || !env.has("WORLD_SIZE")) {
      throw Error("RANK and WORLD_SIZE must be set together (found only " +
                  std::string(env.has("RANK") ? "RANK" : "WORLD_SIZE") + "); launch with titan launch or torchrun");
    }
    world.world_size = env.number("WORLD_SIZE", 1, 1);
    world.rank = env.number("RANK", 0, 0);
    world.local_rank = env.number("LOCAL_RANK", world.rank, 0);
    world.local_world_size = env.number("LOCAL_WORLD_SIZE", world.world_size, 1);
    world.store_hosted_by_agent = env.text("TORCHELASTIC_USE_AGENT_STORE", "") == "True";
    world.source = env.has("TORCHELASTIC_RESTART_COUNT") ? "torchrun"
                   : env.has("TITAN_RESTART_COUNT")       ? "titan launch"
                                                          : "environment";
    check_rank(world, "RANK", "WORLD_SIZE");
  } else if (env.has("SLURM_PROCID") && env.has("SLURM_NTASKS")) {
    world.world_size = env.number("SLURM_NTASKS", 1, 1);
    world.rank = env.number("SLURM_PROCID", 0, 0);
    world.local_rank = env.number("SLURM_LOCALID", 0, 0);
    world.local_world_size = env.number("SLURM_NTASKS_PER_NODE", world.world_size, 1);
    if (world.local_world_size > world.world_size) world.local_world_size = world.world_size;
    world.source = "slurm";
    if (!env.has("MASTER_ADDR")) {
      if (!env.has("SLURM_NODELIST") && !env.has("SLURM_JOB_NODELIST")) {
        throw Error("under Slurm, set MASTER_ADDR or run inside an allocation (SLURM_NODELIST is not set)");
      }
      world.master_addr = first_slurm_host(env.text("SLURM_NODELIST", env.text("SLURM_JOB_NODELIST", "")));
    }
    check_rank(world, "SLURM_PROCID", "SLURM_NTASKS");
  }
  world.master_addr = env.text("MASTER_ADDR", world.master_addr);
  world.master_port = env.number("MASTER_PORT", world.master_port, 1);
  if (world.master_port > 65535) throw Error("MASTER_PORT=" + std::to_string(world.master_port) + " is not a port");
  return world;
}

}  // namespace titan
