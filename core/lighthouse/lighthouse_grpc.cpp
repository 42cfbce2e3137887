// LighthouseClient over gRPC, with the stubs protoc generates from
// torchft.proto (gRPC C++ and protobuf from Debian's archive).
#include "ft/lighthouse_client.hpp"

#include <grpcpp/grpcpp.h>

#include <thread>

#include "titan/error.hpp"
#include "torchft.grpc.pb.h"

namespace titan::ft {
namespace {

std::string describe(const grpc::Status& status) {
  return status.error_message().empty() ? "gRPC status " + std::to_string(status.error_code())
                                        : status.error_message();
}

// Pings on an idle connection: a quorum request is a long poll, and a
// connection that died under it (a cut cable sends no reset) would hold it
// to its deadline; with pings it fails in seconds and is asked again.
grpc::ChannelArguments channel_arguments() {
  grpc::ChannelArguments arguments;
  arguments.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 2000);
  arguments.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 2000);
  arguments.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  arguments.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  return arguments;
}

class GrpcLighthouseClient final : public LighthouseClient {
 public:
  explicit GrpcLighthouseClient(const std::string& address)
      : address_(address),
        stub_(torchft::LighthouseService::NewStub(grpc::CreateCustomChannel(
            lighthouse_host_port(address), grpc::InsecureChannelCredentials(), channel_arguments()))) {}

  void heartbeat(const std::string& replica_id, std::chrono::milliseconds timeout) override {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + timeout);
    torchft::LighthouseHeartbeatRequest request;
    request.set_replica_id(replica_id);
    torchft::LighthouseHeartbeatResponse response;
    const grpc::Status status = stub_->Heartbeat(&context, request, &response);
    if (!status.ok()) throw Error("the Lighthouse at " + address_ + " did not take a heartbeat: " + describe(status));
  }

  Quorum quorum(const QuorumMember& member, std::chrono::milliseconds timeout) override {
    torchft::LighthouseQuorumRequest request;
    torchft::QuorumMember* requester = request.mutable_requester();
    requester->set_replica_id(member.replica_id);
    requester->set_address(member.address);
    requester->set_store_address(member.store_address);
    requester->set_step(member.step);
    requester->set_world_size(member.world_size);
    requester->set_shrink_only(member.shrink_only);
    requester->set_commit_failures(member.commit_failures);
    requester->set_data(member.data);
    torchft::LighthouseQuorumResponse response;
    // A Lighthouse that is down or restarting (a request it dropped, or no
    // connection yet) is waited for, up to the deadline.
    const auto deadline = std::chrono::system_clock::now() + timeout;
    grpc::Status status;
    for (;;) {
      grpc::ClientContext context;
      context.set_deadline(deadline);
      context.set_wait_for_ready(true);
      status = stub_->Quorum(&context, request, &response);
      if (status.error_code() != grpc::StatusCode::UNAVAILABLE || std::chrono::system_clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (!status.ok()) {
      throw Error("no quorum from the Lighthouse at " + address_ + " within " +
                  std::to_string(timeout.count() / 1000) + " s (fault_tolerance.quorum_timeout_seconds): " +
                  describe(status));
    }
    Quorum quorum;
    quorum.quorum_id = response.quorum().quorum_id();
    quorum.created_ns = response.quorum().created().seconds() * 1000000000 + response.quorum().created().nanos();
    for (const torchft::QuorumMember& p : response.quorum().participants()) {
      quorum.participants.push_back({p.replica_id(), p.address(), p.store_address(), p.step(), p.world_size(),
                                     p.shrink_only(), p.commit_failures(), p.data()});
    }
    return quorum;
  }

 private:
  const std::string address_;
  std::unique_ptr<torchft::LighthouseService::Stub> stub_;
};

}  // namespace

std::unique_ptr<LighthouseClient> connect_lighthouse(const std::string& address) {
  if (lighthouse_host_port(address).empty()) throw Error("fault_tolerance: the Lighthouse address is empty");
  return std::make_unique<GrpcLighthouseClient>(address);
}

}  // namespace titan::ft
