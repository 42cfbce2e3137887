// The build without gRPC C++ (core/CMakeLists.txt): fault tolerance is refused.
#include "ft/lighthouse_client.hpp"

#include "titan/error.hpp"

namespace titan::ft {

std::unique_ptr<LighthouseClient> connect_lighthouse(const std::string& /*address*/) {
  throw Error("fault_tolerance.enable: this build of Titan has no gRPC C++ to reach torchft's Lighthouse; install "
              "libgrpc++-dev and protobuf-compiler-grpc (scripts/setup.sh does) and rebuild");
}

}  // namespace titan::ft
