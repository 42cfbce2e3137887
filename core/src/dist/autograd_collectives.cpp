// Collectives as autograd Functions. Each forward and backward goes
// through Comm, so observers see the backward collectives too.
#include "titan/autograd_collectives.hpp"

#include <torch/csrc/autograd/custom_function.h>

#include <ATen/ATen.h>

#include "titan/comm.hpp"
#include "titan/error.hpp"

namespace titan {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Moves `dim` to the front so the comm layer's dim-0 collectives apply.
at::Tensor to_front(const at::Tensor& t, int64_t dim) { return dim == 0 ? t : t.movedim(dim, 0); }
at::Tensor from_front(const at::Tensor& t, int64_t dim) { return dim == 0 ? t : t.movedim(0, dim); }

at::Tensor gather(const at::Tensor& input, Comm& comm, int64_t dim) {
  return from_front(comm.all_gather(to_front(input, dim).contiguous()), dim);
}

at::Tensor scatter_sum(const at::Tensor& input, Comm& comm, int64_t dim) {
  if (input.size(dim) % comm.size() != 0) {
    throw Error("reduce_scatter on group '" + comm.name() + "': dim " + std::to_string(dim) + " of " +
                c10::str(input.sizes()) + " is not divisible by " + std::to_string(comm.size()));
  }
  return from_front(comm.reduce_scatter(to_front(input, dim).contiguous(), ReduceOp::sum), dim);
}

Comm* comm_of(AutogradContext* ctx) { return reinterpret_cast<Comm*>(ctx->saved_data["comm"].toInt()); }

// Observers see a backward collective under its forward's call site.
void save_site(AutogradContext* ctx) { ctx->saved_data["site"] = CallSite::current(); }
std::string backward_site(AutogradContext* ctx) {
  std::string site = ctx->saved_data["site"].toStringRef();
  return site.empty() ? "backward" : site + " (backward)";
}

struct AllGather : torch::autograd::Function<AllGather> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, int64_t comm, int64_t dim) {
    save_site(ctx);
    ctx->saved_data["comm"] = comm;
    ctx->saved_data["dim"] = dim;
    return gather(input, *reinterpret_cast<Comm*>(comm), dim);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    CallSite site(backward_site(ctx), CallSite::Mode::whole);
    return {scatter_sum(grads[0], *comm_of(ctx), ctx->saved_data["dim"].toInt()), at::Tensor(), at::Tensor()};
  }
};

struct AllGatherToReplicate : torch::autograd::Function<AllGatherToReplicate> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, int64_t comm, int64_t dim) {
    Comm& group = *reinterpret_cast<Comm*>(comm);
    ctx->saved_data["dim"] = dim;
    ctx->saved_data["begin"] = input.size(dim) * group.rank();
    ctx->saved_data["length"] = input.size(dim);
    return gather(input, group, dim);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    at::Tensor slice = grads[0].narrow(ctx->saved_data["dim"].toInt(), ctx->saved_data["begin"].toInt(),
                                       ctx->saved_data["length"].toInt());
    return {slice.contiguous(), at::Tensor(), at::Tensor()};
  }
};

struct ReduceScatter : torch::autograd::Function<ReduceScatter> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, int64_t comm, int64_t dim) {
    save_site(ctx);
    ctx->saved_data["comm"] = comm;
    ctx->saved_data["dim"] = dim;
    return scatter_sum(input, *reinterpret_cast<Comm*>(comm), dim);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    CallSite site(backward_site(ctx), CallSite::Mode::whole);
    return {gather(grads[0], *comm_of(ctx), ctx->saved_data["dim"].toInt()), at::Tensor(), at::Tensor()};
  }
};

struct AllReduce : torch::autograd::Function<AllReduce> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, int64_t comm) {
    at::Tensor sum = input.clone();
    reinterpret_cast<Comm*>(comm)->all_reduce(sum, ReduceOp::sum);
    return sum;
  }
  static variable_list backward(AutogradContext*, variable_list grads) { return {grads[0], at::Tensor()}; }
};

struct ReplicateToParallel : torch::autograd::Function<ReplicateToParallel> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, int64_t comm) {
    save_site(ctx);
    ctx->saved_data["comm"] = comm;
    return input.view_as(input);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    CallSite site(backward_site(ctx), CallSite::Mode::whole);
    at::Tensor sum = grads[0].clone();
    comm_of(ctx)->all_reduce(sum, ReduceOp::sum);
    return {sum, at::Tensor()};
  }
};

at::Tensor exchange(const at::Tensor& input, Comm& comm, int64_t split_dim, int64_t concat_dim) {
  const int64_t parts = comm.size();
  if (input.size(split_dim) % parts != 0) {
    throw Error("all_to_all on group '" + comm.name() + "': dim " + std::to_string(split_dim) + " of " +
                c10::str(input.sizes()) + " is not divisible by " + std::to_string(parts));
  }
  // Blocks along split_dim, stacked in front: [parts, ...block].
  at::Tensor blocks = at::stack(input.chunk(parts, split_dim), 0).contiguous();
  at::Tensor received = comm.all_to_all(blocks.flatten(0, 1)).view(blocks.sizes());
  return at::cat(received.unbind(0), concat_dim);
}

struct AllToAll : torch::autograd::Function<AllToAll> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, int64_t comm, int64_t split_dim,
                            int64_t concat_dim) {
    save_site(ctx);
    ctx->saved_data["comm"] = comm;
    ctx->saved_data["split"] = split_dim;
    ctx->saved_data["concat"] = concat_dim;
    return exchange(input, *reinterpret_cast<Comm*>(comm), split_dim, concat_dim);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    CallSite site(backward_site(ctx), CallSite::Mode::whole);
    at::Tensor grad = exchange(grads[0], *comm_of(ctx), ctx->saved_data["concat"].toInt(),
                               ctx->saved_data["split"].toInt());
    return {grad, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

struct AllToAllV : torch::autograd::Function<AllToAllV> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, int64_t comm,
                            const std::vector<int64_t>& send_rows, const std::vector<int64_t>& recv_rows) {
    save_site(ctx);
    ctx->saved_data["comm"] = comm;
    ctx->saved_data["send"] = send_rows;
    ctx->saved_data["recv"] = recv_rows;
    return reinterpret_cast<Comm*>(comm)->all_to_all_v(input, send_rows, recv_rows);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    CallSite site(backward_site(ctx), CallSite::Mode::whole);
    at::Tensor grad = comm_of(ctx)->all_to_all_v(grads[0].contiguous(), ctx->saved_data["recv"].toIntVector(),
                                                 ctx->saved_data["send"].toIntVector());
    return {grad, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

int64_t handle(Comm& comm) { return reinterpret_cast<int64_t>(&comm); }

}  // namespace

at::Tensor all_gather_autograd(const at::Tensor& input, Comm& comm, int64_t dim) {
  return AllGather::apply(input, handle(comm), dim);
}

at::Tensor all_gather_to_replicate(const at::Tensor& input, Comm& comm, int64_t dim) {
  return AllGatherToReplicate::apply(input, handle(comm), dim < 0 ? dim + input.dim() : dim);
}

at::Tensor reduce_scatter_autograd(const at::Tensor& input, Comm& comm, int64_t dim) {
  return ReduceScatter::apply(input, handle(comm), dim);
}

at::Tensor all_reduce_autograd(const at::Tensor& input, Comm& comm) { return AllReduce::apply(input, handle(comm)); }

at::Tensor replicate_to_parallel(const at::Tensor& input, Comm& comm) {
  return ReplicateToParallel::apply(input, handle(comm));
}

at::Tensor all_to_all_autograd(const at::Tensor& input, Comm& comm, int64_t split_dim, int64_t concat_dim) {
  return AllToAll::apply(input, handle(comm), split_dim, concat_dim);
}

at::Tensor all_to_all_v_autograd(const at::Tensor& input, Comm& comm, const std::vector<int64_t>& send_rows,
                                 const std::vector<int64_t>& recv_rows) {
  return AllToAllV::apply(input, handle(comm), send_rows, recv_rows);
}

}  // namespace titan
