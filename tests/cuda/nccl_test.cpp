// The NCCL backend of Titan's process groups on one process (the lent GPU
// machine has one GPU, so multi-rank NCCL is not testable there): with
// backend "nccl" every group runs CUDA tensors through NCCL and CPU tensors
// through Gloo, every collective of the Comm gives the right values in fp32
// and bf16, and a "gloo" runtime refuses CUDA tensors, saying what to set;
// FSDP on one GPU (its gather and reduce buffers on the device) trains as
// the plain GPU run does; and waiting for a collective on the GPU never
// makes the host wait for it.
#include "cuda_skip.hpp"
#include "tensor_support.hpp"

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "../integration/equivalence_runs.hpp"
#include "titan/comm.hpp"
#include "titan/dist_runtime.hpp"
#include "titan/error.hpp"
#include "titan/world.hpp"

namespace {

using titan::ReduceOp;

// A one-process world: groups of size 1 over an in-memory store, no network.
titan::DistRuntime one_process(const std::string& backend) {
  return titan::DistRuntime(titan::World{}, titan::DistTimeouts{}, backend);
}

using titan::test::dtype_name;

// Distinct, signed, exactly representable in bf16; [4, 6] so that rows split evenly.
at::Tensor rows_of(at::ScalarType dtype, at::Device device) {
  return (at::arange(24, at::kFloat).reshape({4, 6}) - 7.5).to(dtype).to(device);
}

// On one rank every collective leaves the values as they were: the
// reduction over one contribution, the stack of one input, the one block.
void check_collectives(titan::Comm& comm, at::ScalarType dtype, at::Device device) {
  INFO("group '" << comm.name() << "', " << std::string(dtype_name(dtype)) << " on " << device);
  const at::Tensor values = rows_of(dtype, device);

  for (auto op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min}) {
    INFO("all_reduce op " << static_cast<int>(op));
    at::Tensor tensor = values.clone();
    comm.all_reduce(tensor, op);
    CHECK(tensor.device() == values.device());  // cuda:0, where `device` may name no index
    CHECK(std::string(c10::toString(tensor.scalar_type())) == c10::toString(dtype));
    CHECK(tensor.equal(values));
  }
  // A strided view is reduced through a contiguous buffer and copied back.
  at::Tensor transposed = values.clone().t();
  comm.all_reduce(transposed, ReduceOp::sum);
  CHECK(transposed.equal(values.t()));
  at::Tensor pending = values.clone();
  comm.all_reduce_async(pending, ReduceOp::avg)->wait();
  CHECK(pending.equal(values));

  at::Tensor gathered = at::zeros_like(values);
  comm.all_gather_into(gathered, values);
  CHECK(gathered.equal(values));
  CHECK(comm.all_gather(values).equal(values));
  at::Tensor gathered_async = at::zeros_like(values);
  comm.all_gather_into_async(gathered_async, values)->wait();
  CHECK(gathered_async.equal(values));

  for (auto op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
    INFO("reduce_scatter op " << static_cast<int>(op));
    at::Tensor scattered = comm.reduce_scatter(values, op);
    CHECK(scattered.device() == values.device());  // cuda:0, where `device` may name no index
    CHECK(scattered.equal(values));
  }
  at::Tensor scattered_into = at::zeros_like(values);
  comm.reduce_scatter_into_async(scattered_into, values, ReduceOp::sum)->wait();
  CHECK(scattered_into.equal(values));

  at::Tensor broadcast = values.clone();
  comm.broadcast(broadcast, 0);
  CHECK(broadcast.equal(values));
  CHECK_THROWS_AS(comm.broadcast(broadcast, 1), titan::Error);  // no rank 1 in a group of one

  at::Tensor exchanged = comm.all_to_all(values);
  CHECK(exchanged.device() == values.device());  // cuda:0, where `device` may name no index
  CHECK(exchanged.equal(values));
}

}  // namespace

#ifdef TITAN_WITH_CUDA  // a CPU-only Titan refuses backend "nccl" outright

TEST_CASE("nccl comm: without a CUDA device, backend nccl is refused with a Titan error, not a crash") {
  if (torch::cuda::is_available()) {
    MESSAGE("TITAN_SKIPPED: a CUDA device is present (this case checks the refusal where there is none)");
    return;
  }
  // LibTorch's ProcessGroupNCCL constructor counts the GPUs and throws when
  // there are none, so the refusal comes at construction, not at the first
  // collective.
  std::string message;
  try {
    one_process("nccl");
  } catch (const titan::Error& error) {
    message = error.what();
  }
  MESSAGE("DistRuntime(backend nccl) without a GPU: " << message);
  CHECK(!message.empty());
}

TEST_CASE("nccl comm: a one-process runtime with backend nccl constructs, and so do its further groups") {
  TITAN_REQUIRE_CUDA("to create a ProcessGroupNCCL (LibTorch refuses one without a GPU)");
  titan::DistRuntime runtime = one_process("nccl");
  titan::Comm& world = runtime.world_group();
  CHECK(world.name() == "world");
  CHECK(world.size() == 1);
  CHECK(world.rank() == 0);
  CHECK(world.global_ranks() == std::vector<int>{0});
  // Each group has its own NCCL communicator, connected at its first CUDA collective.
  std::unique_ptr<titan::Comm> tp = runtime.new_group("tp", {0});
  std::unique_ptr<titan::Comm> tp_again = runtime.new_group("tp", {0});  // a second mesh's group of the same name
  at::Tensor values = rows_of(at::kFloat, at::kCUDA);
  for (titan::Comm* comm : {&world, tp.get(), tp_again.get()}) {
    INFO("group '" << comm->name() << "'");
    at::Tensor tensor = values.clone();
    comm->all_reduce(tensor, ReduceOp::sum);
    CHECK(tensor.equal(values));
    comm->barrier();  // the group's default backend is NCCL: a CUDA barrier
  }
}

TEST_CASE("nccl comm: every collective on CUDA tensors (fp32, bf16) gives the right values at world size 1") {
  TITAN_REQUIRE_CUDA("to run NCCL collectives on CUDA tensors");
  titan::DistRuntime runtime = one_process("nccl");
  for (auto dtype : {at::kFloat, at::kBFloat16}) check_collectives(runtime.world_group(), dtype, at::kCUDA);
  runtime.world_group().barrier();
  torch::cuda::synchronize();
}

TEST_CASE("nccl comm: CPU tensors on a group with NCCL still go through Gloo, interleaved with CUDA ones") {
  TITAN_REQUIRE_CUDA("to create the group's NCCL backend beside its Gloo one");
  titan::DistRuntime runtime = one_process("nccl");
  titan::Comm& comm = runtime.world_group();
  // NCCL takes no CPU tensor, so a CPU collective that succeeds ran on Gloo;
  // CUDA ones before and after show the two backends share the group.
  check_collectives(comm, at::kFloat, at::kCUDA);
  for (auto dtype : {at::kFloat, at::kBFloat16}) check_collectives(comm, dtype, at::kCPU);
  check_collectives(comm, at::kBFloat16, at::kCUDA);
}

TEST_CASE("nccl comm: waiting for a collective on CUDA tensors orders the stream and never makes the host wait for "
          "the GPU (a wait with a timeout would)") {
  TITAN_REQUIRE_CUDA("to queue GPU work ahead of an NCCL collective");
  titan::DistRuntime runtime = one_process("nccl");
  titan::Comm& comm = runtime.world_group();
  at::Tensor warm = rows_of(at::kFloat, at::kCUDA);
  comm.all_reduce(warm, ReduceOp::sum);  // the communicator connects at its first collective
  torch::cuda::synchronize();
  const at::Tensor a = at::randn({4096, 4096}, at::TensorOptions().device(at::kCUDA));
  const auto start = std::chrono::steady_clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  // About 0.1 s of queued products (40 x 137 GFLOP in fp32) before the collective.
  at::Tensor x = a;
  for (int i = 0; i < 40; ++i) x = at::mm(x, a) / 64.0;
  at::Tensor total = x.sum().reshape({1});
  at::Tensor expected = total.clone();
  comm.all_reduce(total, ReduceOp::sum);
  at::Tensor gathered = at::zeros({1}, total.options());
  comm.all_gather_into_async(gathered, total)->wait();
  const double waited = seconds();
  const bool equal = gathered.equal(expected);  // the host reads: now it waits for all of it
  const double finished = seconds();
  MESSAGE("host past the waits after " << waited * 1e3 << " ms; the GPU finished after " << finished * 1e3 << " ms");
  CHECK(equal);
  CHECK(waited < finished / 2);
}

#endif  // TITAN_WITH_CUDA

TEST_CASE("nccl comm: a gloo runtime refuses CUDA tensors in every collective, saying what to set") {
  TITAN_REQUIRE_CUDA("to make the CUDA tensors the gloo groups must refuse");
  titan::DistRuntime runtime = one_process("gloo");
  titan::Comm& comm = runtime.world_group();
  const std::string problem =
      "a CUDA tensor on a group without an NCCL backend; set training.device: cuda so that the groups get one, or "
      "keep the tensor on the CPU";
  // The whole message: the op, the group, this rank, the problem.
  auto refusal = [&](const std::string& op) { return op + " on group 'world' (rank 0 of 1): " + problem; };
  const std::string all_reduce = refusal("all_reduce"), all_gather = refusal("all_gather"),
                    reduce_scatter = refusal("reduce_scatter"), broadcast = refusal("broadcast"),
                    all_to_all = refusal("all_to_all"), send = refusal("send"), recv = refusal("recv");
  at::Tensor values = rows_of(at::kFloat, at::kCUDA);
  at::Tensor tensor = values.clone();
  at::Tensor output = at::zeros_like(values);
  CHECK_THROWS_WITH_AS(comm.all_reduce(tensor, ReduceOp::sum), all_reduce.c_str(), titan::Error);
  CHECK_THROWS_WITH_AS(comm.all_reduce_async(tensor, ReduceOp::avg), all_reduce.c_str(), titan::Error);
  CHECK_THROWS_WITH_AS(comm.all_gather_into(output, values), all_gather.c_str(), titan::Error);
  CHECK_THROWS_WITH_AS(comm.all_gather_into_async(output, values), all_gather.c_str(), titan::Error);
  CHECK_THROWS_WITH_AS(comm.all_gather(values), all_gather.c_str(), titan::Error);
  CHECK_THROWS_WITH_AS(comm.reduce_scatter(values, ReduceOp::sum), reduce_scatter.c_str(), titan::Error);
  CHECK_THROWS_WITH_AS(comm.reduce_scatter_into_async(output, values, ReduceOp::sum), reduce_scatter.c_str(),
                       titan::Error);
  CHECK_THROWS_WITH_AS(comm.broadcast(tensor, 0), broadcast.c_str(), titan::Error);
  CHECK_THROWS_WITH_AS(comm.all_to_all(values), all_to_all.c_str(), titan::Error);
  CHECK_THROWS_WITH_AS(comm.send(values, 0), send.c_str(), titan::Error);
  CHECK_THROWS_WITH_AS(comm.send_async(values, 0), send.c_str(), titan::Error);
  CHECK_THROWS_WITH_AS(comm.recv(output, 0), recv.c_str(), titan::Error);
  CHECK_THROWS_WITH_AS(comm.recv_async(output, 0), recv.c_str(), titan::Error);
  // Refused before reaching Gloo: the tensors are untouched and the group still works on the CPU.
  CHECK(tensor.equal(values));
  check_collectives(comm, at::kFloat, at::kCPU);
}

TEST_CASE("nccl comm: FSDP on one GPU (NCCL at world size 1, its buffers on the device) trains like the plain GPU "
          "run") {
  TITAN_REQUIRE_CUDA("to train with FSDP on a GPU");
  const std::string gpu = " --set training.device=cuda --set training.cuda_graph=false";
  const titan::test::RunOutput plain = titan::test::run_single("fsdp_gpu_plain", gpu);
  const titan::test::RunOutput sharded =
      titan::test::run_single("fsdp_gpu_one_rank", gpu + " --set 'plugins=[{name: fsdp}]'");
  titan::test::check_equivalent(sharded, plain, 1e-5);
}
