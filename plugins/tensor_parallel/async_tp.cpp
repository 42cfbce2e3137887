// Chunked all-gather+matmul and matmul+reduce-scatter. Everything runs
// sequence-first ([seq, batch, features]) so that the comm layer's dim-0
// collectives move whole sequence rows; a gathered chunk c holds rows
// (rank r, chunk c) for every r, which is where they go in the result.
#include "async_tp.h"

#include <torch/csrc/autograd/custom_function.h>

#include <ATen/ATen.h>

#include <memory>
#include <vector>

#include "titan/comm.hpp"
#include "titan/error.hpp"

namespace titan::tensor_parallel {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The largest chunk count <= wanted that divides the local sequence.
int64_t chunk_count(int64_t local_seq, int64_t wanted) {
  for (int64_t k = std::max<int64_t>(1, wanted); k > 1; --k) {
    if (local_seq % k == 0) return k;
  }
  return 1;
}

// Gathers the sequence-first local rows chunk by chunk: every chunk's
// all-gather starts at once, then `use(c, gathered [ranks * rows, ...])`
// runs on chunk c as soon as it has arrived, while later chunks are in flight.
template <class Use>
void gather_chunks(const at::Tensor& local_first, Comm& comm, int64_t chunks, Use use) {
  std::vector<at::Tensor> pieces = local_first.chunk(chunks, 0), gathered;
  std::vector<std::unique_ptr<CommWork>> works;
  for (auto& piece : pieces) {
    piece = piece.contiguous();
    std::vector<int64_t> shape = piece.sizes().vec();
    shape[0] *= comm.size();
    gathered.push_back(at::empty(shape, piece.options()));
    works.push_back(comm.all_gather_into_async(gathered.back(), piece));
  }
  for (size_t c = 0; c < works.size(); ++c) {
    works[c]->wait();
    use(static_cast<int64_t>(c), gathered[c]);
  }
}

// [ranks * rows, ...] chunk results (rank-major) -> [ranks * chunks * rows, ...] in sequence order.
at::Tensor assemble(const std::vector<at::Tensor>& chunk_results, int64_t ranks) {
  std::vector<at::Tensor> per_rank;
  for (const auto& result : chunk_results) {
    std::vector<int64_t> shape = result.sizes().vec();
    shape[0] /= ranks;
    shape.insert(shape.begin(), ranks);
    per_rank.push_back(result.reshape(shape));
  }
  at::Tensor stacked = at::stack(per_rank, 1);  // [ranks, chunks, rows, ...]
  return stacked.flatten(0, 2);
}

// full_first [seq, ...] -> the chunks' rows of every rank: chunk c is
// [ranks, rows, ...] (rank r's c-th piece of its sequence shard).
at::Tensor chunk_of_every_rank(const at::Tensor& full_first, int64_t ranks, int64_t chunks, int64_t c) {
  std::vector<int64_t> shape = full_first.sizes().vec();
  int64_t rows = shape[0] / (ranks * chunks);
  shape.erase(shape.begin());
  shape.insert(shape.begin(), {ranks, chunks, rows});
  return full_first.reshape(shape).select(1, c);
}

// Computes `part(c)` ([ranks, rows, ...] per chunk), reduce-scatters it
// while the next chunk computes; returns this rank's rows in order.
template <class Part>
at::Tensor scatter_chunks(Comm& comm, int64_t chunks, Part part) {
  std::vector<at::Tensor> outputs;
  std::vector<std::unique_ptr<CommWork>> works;
  for (int64_t c = 0; c < chunks; ++c) {
    at::Tensor partial = part(c).contiguous();
    at::Tensor flat = partial.flatten(0, 1);
    std::vector<int64_t> shape = partial.sizes().vec();
    shape.erase(shape.begin());
    outputs.push_back(at::empty(shape, partial.options()));
    works.push_back(comm.reduce_scatter_into_async(outputs.back(), flat, ReduceOp::sum));
  }
  for (auto& work : works) work->wait();
  return at::cat(outputs, 0);
}

Comm& comm_of(AutogradContext* ctx) { return *reinterpret_cast<Comm*>(ctx->saved_data["comm"].toInt()); }

struct AllGatherMatmul : torch::autograd::Function<AllGatherMatmul> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight, int64_t comm_handle,
                            int64_t chunks) {
    Comm& comm = *reinterpret_cast<Comm*>(comm_handle);
    std::vector<at::Tensor> outputs, inputs;
    gather_chunks(x.transpose(0, 1), comm, chunks, [&](int64_t, const at::Tensor& gathered) {
      outputs.push_back(at::linear(gathered, weight));
      inputs.push_back(gathered);
    });
    at::Tensor full_input = assemble(inputs, comm.size());  // [seq, batch, in], kept for grad-weight
    ctx->save_for_backward({full_input, weight});
    ctx->saved_data["comm"] = comm_handle;
    ctx->saved_data["chunks"] = chunks;
    return assemble(outputs, comm.size()).transpose(0, 1).contiguous();
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor& full_input = saved[0];
    const at::Tensor& weight = saved[1];
    Comm& comm = comm_of(ctx);
    const int64_t chunks = ctx->saved_data["chunks"].toInt();
    at::Tensor grad_first = grads[0].transpose(0, 1).contiguous();  // [seq, batch, out_local]
    // grad-input: each rank's rows of grad @ weight, summed over ranks
    // (every rank's weight rows contributed), chunk by chunk.
    at::Tensor grad_input = scatter_chunks(comm, chunks, [&](int64_t c) {
      return at::matmul(chunk_of_every_rank(grad_first, comm.size(), chunks, c), weight);
    });
    at::Tensor grad_weight = at::matmul(grad_first.flatten(0, 1).t(), full_input.flatten(0, 1));
    return {grad_input.transpose(0, 1).contiguous(), grad_weight, at::Tensor(), at::Tensor()};
  }
};

struct MatmulReduceScatter : torch::autograd::Function<MatmulReduceScatter> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight, int64_t comm_handle,
                            int64_t chunks) {
    Comm& comm = *reinterpret_cast<Comm*>(comm_handle);
    at::Tensor x_first = x.transpose(0, 1).contiguous();  // [seq, batch, in_local]
    at::Tensor out = scatter_chunks(comm, chunks, [&](int64_t c) {
      return at::linear(chunk_of_every_rank(x_first, comm.size(), chunks, c), weight);
    });
    ctx->save_for_backward({x_first, weight});
    ctx->saved_data["comm"] = comm_handle;
    ctx->saved_data["chunks"] = chunks;
    return out.transpose(0, 1).contiguous();
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor& x_first = saved[0];
    const at::Tensor& weight = saved[1];
    Comm& comm = comm_of(ctx);
    const int64_t chunks = ctx->saved_data["chunks"].toInt();
    // The gradient of this rank's shard, gathered chunk by chunk: each
    // chunk's grad-input is computed while the next chunk arrives.
    std::vector<at::Tensor> grad_inputs, grad_outputs;
    gather_chunks(grads[0].transpose(0, 1), comm, chunks, [&](int64_t, const at::Tensor& gathered) {
      grad_inputs.push_back(at::matmul(gathered, weight));
      grad_outputs.push_back(gathered);
    });
    at::Tensor grad_input = assemble(grad_inputs, comm.size());
    at::Tensor full_grad = assemble(grad_outputs, comm.size());  // [seq, batch, out]
    at::Tensor grad_weight = at::matmul(full_grad.flatten(0, 1).t(), x_first.flatten(0, 1));
    return {grad_input.transpose(0, 1).contiguous(), grad_weight, at::Tensor(), at::Tensor()};
  }
};

void check_sequence(const at::Tensor& x, const char* op) {
  if (x.dim() != 3) throw Error(std::string("async TP ") + op + ": expected [batch, seq, features], got " + c10::str(x.sizes()));
}

}  // namespace

at::Tensor all_gather_matmul(const at::Tensor& x, const at::Tensor& weight, Comm& comm, int64_t chunks) {
  check_sequence(x, "all_gather_matmul");
  return AllGatherMatmul::apply(x, weight, reinterpret_cast<int64_t>(&comm), chunk_count(x.size(1), chunks));
}

at::Tensor matmul_reduce_scatter(const at::Tensor& x, const at::Tensor& weight, Comm& comm, int64_t chunks) {
  check_sequence(x, "matmul_reduce_scatter");
  if (x.size(1) % comm.size() != 0) {
    throw Error("async TP matmul_reduce_scatter: sequence length " + std::to_string(x.size(1)) +
                " is not divisible by the TP degree " + std::to_string(comm.size()));
  }
  return MatmulReduceScatter::apply(x, weight, reinterpret_cast<int64_t>(&comm),
                                    chunk_count(x.size(1) / comm.size(), chunks));
}

}  // namespace titan::tensor_parallel
