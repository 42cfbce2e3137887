// titan_dist_checks: the comm layer checked against the definitions of its
// collectives, as N processes under `titan launch`. Every input is a pure
// function of (rank, shape), so each rank computes locally what every other
// rank sent and what a collective must return.
//
//   titan launch --nproc-per-node N -- titan_dist_checks NAME[,NAME...]
//
// Prints "CHECK NAME ok" per check that passed; otherwise every mismatch
// (rank, what, max abs diff) and exit status 1.
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "titan/autograd_collectives.hpp"
#include "titan/comm.hpp"
#include "titan/device_mesh.hpp"
#include "titan/dist_runtime.hpp"
#include "titan/error.hpp"
#include "titan/logging.hpp"
#include "titan/placement.hpp"
#include "titan/world.hpp"

namespace {

using titan::Comm;
using titan::ReduceOp;

// Mismatches are collected, not thrown: every rank keeps issuing the same
// collectives, so one wrong value does not turn into a hang elsewhere.
struct Report {
  int rank = -1;  // until the world is known
  std::string check;
  std::vector<std::string> failures;

  void fail(const std::string& what) {
    failures.push_back("rank " + std::to_string(rank) + ", check " + check + ": " + what);
  }
};
Report report;

std::string tensor_text(const at::Tensor& tensor) {
  if (tensor.numel() > 48) return "(" + std::to_string(tensor.numel()) + " elements)";
  std::ostringstream out;
  out << tensor.to(at::kDouble).flatten();
  std::string text = out.str();
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

// Same dtype, shape and values within `tolerance` (0: exact).
void expect_equal(const std::string& what, const at::Tensor& actual, const at::Tensor& expected, double tolerance = 0) {
  if (!actual.defined()) return report.fail(what + ": result is undefined");
  if (actual.scalar_type() != expected.scalar_type()) {
    return report.fail(what + ": dtype " + c10::toString(actual.scalar_type()) + ", expected " +
                       c10::toString(expected.scalar_type()));
  }
  if (actual.sizes() != expected.sizes()) {
    return report.fail(what + ": shape " + c10::str(actual.sizes()) + ", expected " + c10::str(expected.sizes()));
  }
  if (actual.numel() == 0) return;
  double diff = (actual.to(at::kDouble) - expected.to(at::kDouble)).abs().max().item<double>();
  if (!(diff <= tolerance)) {
    std::ostringstream out;
    out << what << ": max abs diff " << diff << " (tolerance " << tolerance << ")\n    got      " << tensor_text(actual)
        << "\n    expected " << tensor_text(expected);
    report.fail(out.str());
  }
}

// Bit-for-bit equality of two 2-byte tensors (bf16 moved as raw bits).
void expect_bits(const std::string& what, const at::Tensor& actual, const at::Tensor& expected) {
  if (actual.scalar_type() != expected.scalar_type() || actual.sizes() != expected.sizes()) {
    return expect_equal(what, actual, expected);
  }
  at::Tensor a = actual.contiguous().view(at::kShort), e = expected.contiguous().view(at::kShort);
  int64_t differing = a.ne(e).sum().item<int64_t>();
  if (differing != 0) {
    report.fail(what + ": " + std::to_string(differing) + " of " + std::to_string(a.numel()) +
                " elements differ in their bits\n    got bits      " + tensor_text(a) + "\n    expected bits " +
                tensor_text(e));
  }
}

void expect(bool ok, const std::string& what) {
  if (!ok) report.fail(what);
}

// An exception's message; LibTorch's c10::Error without its backtrace.
std::string message_of(const std::exception& error) {
  if (auto* torch_error = dynamic_cast<const c10::Error*>(&error)) return torch_error->what_without_backtrace();
  return error.what();
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::string text;
  for (int rank : ranks) text += (text.empty() ? "" : ",") + std::to_string(rank);
  return "{" + text + "}";
}

// ---------------------------------------------------------------------------
// Inputs

bool is_integral(at::ScalarType dtype) { return at::isIntegralType(dtype, /*includeBool=*/false); }

// Rank `rank`'s input: integers in [-30, 30], or for floating types those
// divided by 4. Quarters up to 7.5 have few significant bits, so their sums
// over a few ranks are exact in bf16 and fp32, and an average is one
// rounding of an exact sum whatever order the backend adds in.
at::Tensor rank_input(int rank, at::IntArrayRef shape, at::ScalarType dtype, int salt = 0) {
  int64_t numel = c10::multiply_integers(shape);
  at::Tensor index = at::arange(numel, at::kLong);
  at::Tensor values = (index * 7 + rank * 13 + salt * 5).remainder(61) - 30;
  if (!is_integral(dtype)) values = values.to(at::kDouble).div(4);
  return values.reshape(shape).to(dtype);
}

// Random bf16 bit patterns, NaN/Inf/subnormal encodings included: a
// collective that moves bf16 must move every pattern unchanged.
at::Tensor rank_bits(int rank, at::IntArrayRef shape, int salt = 0) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(1000 * salt + rank + 1);
  return at::randint(-32768, 32768, shape, generator, at::TensorOptions(at::kShort)).view(at::kBFloat16);
}

// The dtype a reduction is computed in: bf16 is reduced in fp32.
at::ScalarType compute_dtype(at::ScalarType dtype) { return dtype == at::kBFloat16 ? at::kFloat : dtype; }

// The definition of op over every rank's `input_of(rank)`, computed locally.
at::Tensor reduce_definition(int size, ReduceOp op, const std::function<at::Tensor(int)>& input_of) {
  at::Tensor first = input_of(0);
  at::Tensor result = first.to(compute_dtype(first.scalar_type()));
  for (int rank = 1; rank < size; ++rank) {
    at::Tensor other = input_of(rank).to(result.scalar_type());
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::avg:
        result = result + other;
        break;
      case ReduceOp::max:
        result = at::maximum(result, other);
        break;
      case ReduceOp::min:
        result = at::minimum(result, other);
        break;
    }
  }
  if (op == ReduceOp::avg) {
    result = is_integral(result.scalar_type()) ? result.div(size, "trunc") : result.div(size);
  }
  return result.to(first.scalar_type());
}

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::avg:
      return "avg";
    case ReduceOp::max:
      return "max";
    case ReduceOp::min:
      return "min";
  }
  return "?";
}

std::string dtype_name(at::ScalarType dtype) { return c10::toString(dtype); }

// The message of the titan::Error `body` throws, or a failure.
std::string error_of(const std::string& what, const std::function<void()>& body) {
  try {
    body();
  } catch (const titan::Error& error) {
    return error.what();
  } catch (const std::exception& error) {
    report.fail(what + ": threw a non-titan exception: " + message_of(error));
    return message_of(error);
  }
  report.fail(what + ": did not throw");
  return "";
}

// A LibTorch backtrace inside a titan::Error: not a message a user can act on.
bool has_backtrace(const std::string& message) { return message.find("Exception raised from") != std::string::npos; }

void expect_error(const std::string& what, const std::string& must_contain, const std::function<void()>& body) {
  std::string message = error_of(what, body);
  if (!message.empty() && message.find(must_contain) == std::string::npos) {
    report.fail(what + ": the error does not contain \"" + must_contain + "\": " + message);
  }
  if (has_backtrace(message)) {
    report.fail(what + ": the error carries a LibTorch backtrace: " + message.substr(0, message.find('\n')) + " ...");
  }
}

// ---------------------------------------------------------------------------
// Collectives

void check_all_reduce(Comm& comm) {
  const int me = comm.rank(), n = comm.size();
  const std::vector<int64_t> shape{3, 5};
  for (auto dtype : {at::kFloat, at::kDouble, at::kLong, at::kBFloat16}) {
    for (auto op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min}) {
      std::string what = std::string("all_reduce ") + op_name(op) + " " + dtype_name(dtype);
      at::Tensor tensor = rank_input(me, shape, dtype);
      try {
        comm.all_reduce(tensor, op);
      } catch (const titan::Error& error) {
        // The average of integers has two acceptable definitions: the
        // truncated quotient (checked below), or a titan::Error that names
        // the group, raised the same way on every rank.
        bool integer_avg = op == ReduceOp::avg && is_integral(dtype);
        std::string message = error.what();
        if (!integer_avg || message.find("'" + comm.name() + "'") == std::string::npos || has_backtrace(message)) {
          report.fail(what + " threw: " + error.what());
        }
        continue;
      } catch (const std::exception& error) {
        report.fail(what + " threw a non-titan exception: " + message_of(error));
        continue;
      }
      expect_equal(what, tensor, reduce_definition(n, op, [&](int rank) { return rank_input(rank, shape, dtype); }));
    }
  }

  // In place through non-contiguous views: the base tensor must change.
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    at::Tensor base = rank_input(me, {5, 3}, dtype, 1);
    at::Tensor transposed = base.t();
    comm.all_reduce(transposed, ReduceOp::sum);
    expect_equal("all_reduce sum of a transposed view (" + dtype_name(dtype) + "), seen through its base", base,
                 reduce_definition(n, ReduceOp::sum, [&](int rank) {
                   return rank_input(rank, {5, 3}, dtype, 1);
                 }));
    at::Tensor wide = rank_input(me, {4, 6}, dtype, 2);
    at::Tensor column = wide.narrow(1, 2, 1);
    comm.all_reduce(column, ReduceOp::max);
    at::Tensor expected = rank_input(me, {4, 6}, dtype, 2);
    expected.narrow(1, 2, 1).copy_(reduce_definition(n, ReduceOp::max, [&](int rank) {
      return rank_input(rank, {4, 6}, dtype, 2).narrow(1, 2, 1);
    }));
    expect_equal("all_reduce max of a column view (" + dtype_name(dtype) + "), rest of the base untouched", wide,
                 expected);
  }

  // Two in flight at once, finished in the opposite order.
  at::Tensor a = rank_input(me, {7}, at::kFloat, 3);
  at::Tensor b = rank_input(me, {2, 2}, at::kBFloat16, 4);
  auto work_a = comm.all_reduce_async(a, ReduceOp::sum);
  auto work_b = comm.all_reduce_async(b, ReduceOp::min);
  work_b->wait();
  work_a->wait();
  work_a->wait();  // a second wait is a no-op
  expect_equal("all_reduce_async sum float32", a,
               reduce_definition(n, ReduceOp::sum, [&](int rank) { return rank_input(rank, {7}, at::kFloat, 3); }));
  expect_equal("all_reduce_async min bf16", b, reduce_definition(n, ReduceOp::min, [&](int rank) {
                 return rank_input(rank, {2, 2}, at::kBFloat16, 4);
               }));

  // A 0-dim tensor is a legal all-reduce.
  at::Tensor scalar = at::scalar_tensor(static_cast<double>(me + 1), at::kDouble);
  comm.all_reduce(scalar, ReduceOp::sum);
  expect_equal("all_reduce sum of a 0-dim tensor", scalar, at::scalar_tensor(n * (n + 1) / 2.0, at::kDouble));
}

void check_all_gather(Comm& comm) {
  const int me = comm.rank(), n = comm.size();
  auto gathered = [&](const std::function<at::Tensor(int)>& input_of) {
    std::vector<at::Tensor> parts;
    for (int rank = 0; rank < n; ++rank) parts.push_back(input_of(rank));
    return at::cat(parts, 0);
  };

  at::Tensor input = rank_input(me, {2, 3}, at::kFloat);
  at::Tensor output = at::full({2 * n, 3}, -999.0, at::kFloat);
  comm.all_gather_into(output, input);
  auto f32_of = [](int rank) { return rank_input(rank, {2, 3}, at::kFloat); };
  expect_equal("all_gather_into float32 [2, 3]", output, gathered(f32_of));
  expect_equal("Comm::all_gather float32 [2, 3]", comm.all_gather(input), gathered(f32_of));
  expect_equal("all_gather_into left its input unchanged", input, f32_of(me));

  at::Tensor bits = rank_bits(me, {3, 4});
  at::Tensor bits_out = at::zeros({3 * n, 4}, at::kBFloat16);
  comm.all_gather_into(bits_out, bits);
  auto bits_of = [](int rank) { return rank_bits(rank, {3, 4}); };
  expect_bits("all_gather_into bf16 [3, 4] (all bit patterns)", bits_out, gathered(bits_of));
  expect_bits("Comm::all_gather bf16 [3, 4]", comm.all_gather(bits), gathered(bits_of));

  // A transposed (non-contiguous) input and a 1-D input.
  at::Tensor wide = rank_input(me, {3, 2}, at::kFloat, 5);
  expect_equal("Comm::all_gather of a transposed input", comm.all_gather(wide.t()), gathered([](int rank) {
                 return rank_input(rank, {3, 2}, at::kFloat, 5).t();
               }));
  expect_equal("Comm::all_gather int64 1-D", comm.all_gather(rank_input(me, {5}, at::kLong)),
               gathered([](int rank) { return rank_input(rank, {5}, at::kLong); }));

  // Into a contiguous slice of a bigger buffer: rows outside stay untouched.
  at::Tensor buffer = at::full({2 * n + 2, 3}, -999.0, at::kFloat);
  at::Tensor slice = buffer.narrow(0, 1, 2 * n);
  comm.all_gather_into(slice, input);
  at::Tensor expected_buffer = at::full({2 * n + 2, 3}, -999.0, at::kFloat);
  expected_buffer.narrow(0, 1, 2 * n).copy_(gathered(f32_of));
  expect_equal("all_gather_into a row slice of a larger buffer", buffer, expected_buffer);
}

void check_reduce_scatter(Comm& comm) {
  const int me = comm.rank(), n = comm.size();
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    for (auto op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
      std::string what = std::string("reduce_scatter ") + op_name(op) + " " + dtype_name(dtype);
      auto input_of = [&](int rank) { return rank_input(rank, {2 * n, 3}, dtype, 6); };
      at::Tensor input = input_of(me);
      at::Tensor result;
      try {
        result = comm.reduce_scatter(input, op);
      } catch (const std::exception& error) {
        report.fail(what + " threw: " + message_of(error));
        continue;
      }
      expect_equal(what, result, reduce_definition(n, op, input_of).narrow(0, 2 * me, 2));
      expect_equal(what + " left its input unchanged", input, input_of(me));
      // The async form (async tensor parallelism): same rows once waited on.
      at::Tensor output = at::full({2, 3}, -7.0, at::TensorOptions().dtype(dtype));
      try {
        comm.reduce_scatter_into_async(output, input, op)->wait();
        expect_equal(what + " (async)", output, result);
      } catch (const std::exception& error) {
        report.fail(what + " (async) threw: " + message_of(error));
      }
    }
  }
}

void check_broadcast(Comm& comm) {
  const int me = comm.rank(), n = comm.size();
  for (int root = 0; root < n; ++root) {
    at::Tensor tensor = rank_input(me, {4, 3}, at::kFloat, root);
    comm.broadcast(tensor, root);
    expect_equal("broadcast float32 from root " + std::to_string(root), tensor,
                 rank_input(root, {4, 3}, at::kFloat, root));
    at::Tensor bits = rank_bits(me, {5}, root);
    comm.broadcast(bits, root);
    expect_bits("broadcast bf16 bits from root " + std::to_string(root), bits, rank_bits(root, {5}, root));
  }
  at::Tensor base = rank_input(me, {3, 4}, at::kDouble, 9);
  at::Tensor transposed = base.t();
  comm.broadcast(transposed, n - 1);
  expect_equal("broadcast into a transposed view, seen through its base", base,
               rank_input(n - 1, {3, 4}, at::kDouble, 9));
}

// all_to_all_v's test splits: 0, 1 or 2 rows, some ranks sending nothing to some.
int64_t uneven_rows(int sender, int receiver) { return (sender + 2 * receiver) % 3; }
// The rows rank `sender` sends to each of n ranks, and those `receiver` gets from each.
std::vector<int64_t> uneven_sends(int sender, int n) {
  std::vector<int64_t> rows;
  for (int r = 0; r < n; ++r) rows.push_back(uneven_rows(sender, r));
  return rows;
}
std::vector<int64_t> uneven_receives(int receiver, int n) {
  std::vector<int64_t> rows;
  for (int sender = 0; sender < n; ++sender) rows.push_back(uneven_rows(sender, receiver));
  return rows;
}
int64_t split_total(const std::vector<int64_t>& rows) {
  int64_t total = 0;
  for (int64_t r : rows) total += r;
  return total;
}
// What rank `me` receives: each sender's block for it, in sender order.
at::Tensor uneven_exchanged(int n, int me, const std::function<std::vector<int64_t>(int)>& send_of,
                            const std::function<at::Tensor(int)>& input_of) {
  std::vector<at::Tensor> blocks;
  for (int sender = 0; sender < n; ++sender) {
    std::vector<int64_t> rows = send_of(sender);
    int64_t offset = 0;
    for (int r = 0; r < me; ++r) offset += rows[static_cast<size_t>(r)];
    blocks.push_back(input_of(sender).narrow(0, offset, rows[static_cast<size_t>(me)]));
  }
  return at::cat(blocks, 0);
}

void check_all_to_all(Comm& comm) {
  const int me = comm.rank(), n = comm.size();
  // Row block r of rank s's input lands in rank r's output as block s.
  auto exchanged = [&](const std::function<at::Tensor(int)>& input_of, int64_t rows) {
    std::vector<at::Tensor> blocks;
    for (int sender = 0; sender < n; ++sender) blocks.push_back(input_of(sender).narrow(0, me * rows, rows));
    return at::cat(blocks, 0);
  };
  for (auto dtype : {at::kFloat, at::kLong}) {
    auto input_of = [&](int rank) { return rank_input(rank, {2 * n, 3}, dtype, 7); };
    expect_equal("all_to_all " + dtype_name(dtype) + " [2n, 3]", comm.all_to_all(input_of(me)), exchanged(input_of, 2));
  }
  auto bits_of = [&](int rank) { return rank_bits(rank, {3 * n, 2}, 7); };
  expect_bits("all_to_all bf16 bits [3n, 2]", comm.all_to_all(bits_of(me)), exchanged(bits_of, 3));
  auto transposed_of = [&](int rank) { return rank_input(rank, {3, n}, at::kFloat, 8).t(); };
  expect_equal("all_to_all of a transposed input", comm.all_to_all(transposed_of(me)), exchanged(transposed_of, 1));

  // Uneven splits, some empty: rank s sends uneven_rows(s, r) rows to rank r.
  auto send_of = [&](int sender) { return uneven_sends(sender, n); };
  const std::vector<int64_t> recv = uneven_receives(me, n);
  for (auto dtype : {at::kFloat, at::kLong}) {
    auto input_of = [&](int rank) { return rank_input(rank, {split_total(send_of(rank)), 3}, dtype, 17); };
    expect_equal("all_to_all_v " + dtype_name(dtype) + " uneven splits", comm.all_to_all_v(input_of(me), send_of(me), recv),
                 uneven_exchanged(n, me, send_of, input_of));
  }
}

void check_send_recv(Comm& comm) {
  const int me = comm.rank(), n = comm.size();
  const int next = (me + 1) % n, previous = (me + n - 1) % n;
  at::Tensor outgoing = rank_input(me, {3, 4}, at::kFloat, 10);
  at::Tensor incoming = at::zeros({3, 4}, at::kFloat);
  at::Tensor outgoing_bits = rank_bits(me, {6}, 10);
  at::Tensor incoming_bits = at::zeros({6}, at::kBFloat16);
  // send blocks until the peer receives: even ranks send first, odd ranks
  // receive first, so the ring cannot deadlock.
  auto send_all = [&] {
    comm.send(outgoing, next);
    comm.send(outgoing_bits, next);
  };
  auto recv_all = [&] {
    comm.recv(incoming, previous);
    comm.recv(incoming_bits, previous);
  };
  if (me % 2 == 0) {
    send_all();
    recv_all();
  } else {
    recv_all();
    send_all();
  }
  expect_equal("ring recv float32 from rank " + std::to_string(previous), incoming,
               rank_input(previous, {3, 4}, at::kFloat, 10));
  expect_bits("ring recv bf16 from rank " + std::to_string(previous), incoming_bits, rank_bits(previous, {6}, 10));
  expect_equal("send left its tensor unchanged", outgoing, rank_input(me, {3, 4}, at::kFloat, 10));
}

void check_barrier(Comm& comm) {
  // The last rank arrives late; nobody may leave the barrier before it.
  using Clock = std::chrono::steady_clock;
  const auto delay = std::chrono::milliseconds(400);
  comm.barrier();
  auto start = Clock::now();
  if (comm.rank() == comm.size() - 1) std::this_thread::sleep_for(delay);
  comm.barrier();
  auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  expect(waited >= delay - std::chrono::milliseconds(100), "barrier returned after " + std::to_string(waited.count()) +
                                                               " ms, before the late rank (" +
                                                               std::to_string(delay.count()) + " ms) arrived");
}

// Ranks of an uneven row split may hold no rows (even_row_shard); their
// collectives still have to complete.
void check_empty(Comm& comm) {
  const int n = comm.size();
  at::Tensor nothing = at::zeros({0, 3}, at::kFloat);
  comm.all_reduce(nothing, ReduceOp::sum);
  expect(nothing.sizes() == c10::IntArrayRef({0, 3}), "all_reduce of a [0, 3] tensor changed its shape");
  at::Tensor gathered = at::zeros({0, 3}, at::kFloat);
  comm.all_gather_into(gathered, at::zeros({0, 3}, at::kFloat));
  expect(gathered.numel() == 0, "all_gather_into of [0, 3] inputs");
  expect(comm.reduce_scatter(at::zeros({0, 3}), ReduceOp::sum).sizes() == c10::IntArrayRef({0, 3}),
         "reduce_scatter of a [0, 3] tensor does not give [0, 3]");
  expect(comm.all_to_all(at::zeros({0, 3})).sizes() == c10::IntArrayRef({0, 3}),
         "all_to_all of a [0, 3] tensor does not give [0, 3]");
  at::Tensor empty_bf16 = at::zeros({0}, at::kBFloat16);
  comm.broadcast(empty_bf16, n - 1);
  // The group still works.
  at::Tensor one = at::ones({1});
  comm.all_reduce(one, ReduceOp::sum);
  expect_equal("all_reduce after the empty collectives", one, at::full({1}, static_cast<double>(n)));
}

void check_collectives(titan::DistRuntime& runtime) {
  Comm& comm = runtime.world_group();
  check_all_reduce(comm);
  check_all_gather(comm);
  check_reduce_scatter(comm);
  check_broadcast(comm);
  check_all_to_all(comm);
  check_send_recv(comm);
  check_barrier(comm);
  check_empty(comm);
}

// ---------------------------------------------------------------------------
// Local validation: bad calls throw before anything reaches the backend.

struct CountingObserver : titan::CommObserver {
  std::vector<titan::CollectiveEvent> enqueued, started, completed;
  std::vector<bool> completed_ok;
  void on_enqueue(const titan::CollectiveEvent& event) override { enqueued.push_back(event); }
  void on_start(const titan::CollectiveEvent& event) override { started.push_back(event); }
  void on_complete(const titan::CollectiveEvent& event, bool ok) override {
    completed.push_back(event);
    completed_ok.push_back(ok);
  }
};

void check_validation(titan::DistRuntime& runtime) {
  std::vector<int> everyone;
  for (int rank = 0; rank < runtime.world().world_size; ++rank) everyone.push_back(rank);
  auto comm = runtime.new_group("validated", everyone);
  const int me = comm->rank(), n = comm->size();
  const std::string group = "group 'validated'";
  CountingObserver observer;
  titan::add_comm_observer(&observer);

  at::Tensor input = rank_input(me, {2, 3}, at::kFloat);
  at::Tensor too_long = at::zeros({2 * n + 1, 3}, at::kFloat);
  expect_error("all_gather_into with one row too many", group, [&] { comm->all_gather_into(too_long, input); });
  at::Tensor wrong_width = at::zeros({2 * n, 4}, at::kFloat);
  expect_error("all_gather_into with the wrong row width", group, [&] { comm->all_gather_into(wrong_width, input); });
  at::Tensor wrong_dtype = at::zeros({2 * n, 3}, at::kDouble);
  expect_error("all_gather_into with the wrong dtype", group, [&] { comm->all_gather_into(wrong_dtype, input); });
  at::Tensor strided = at::zeros({3, 2 * n}, at::kFloat).t();
  expect_error("all_gather_into a non-contiguous output", group, [&] { comm->all_gather_into(strided, input); });
  expect_error("all_gather of a 0-dim tensor", group, [&] { comm->all_gather(at::scalar_tensor(1.0)); });
  expect_error("reduce_scatter with dim 0 not divisible by the group size", group, [&] {
    comm->reduce_scatter(at::zeros({2 * n + 1, 3}), ReduceOp::sum);
  });
  expect_error("reduce_scatter of a 0-dim tensor", group, [&] { comm->reduce_scatter(at::scalar_tensor(1.0)); });
  expect_error("all_to_all with dim 0 not divisible by the group size", group, [&] {
    comm->all_to_all(at::zeros({n + 1, 2}));
  });
  at::Tensor some = at::zeros({2});
  expect_error("broadcast from root = group size", group, [&] { comm->broadcast(some, n); });
  expect_error("broadcast from root -1", group, [&] { comm->broadcast(some, -1); });
  expect_error("send to a peer outside the group", group, [&] { comm->send(some, n); });
  expect_error("recv from a peer outside the group", group, [&] { comm->recv(some, -1); });
  at::Tensor undefined;
  expect_error("all_reduce of an undefined tensor", group, [&] { comm->all_reduce(undefined); });
  expect(observer.enqueued.empty(), "rejected calls were shown to the observers as enqueued (" +
                                        std::to_string(observer.enqueued.size()) + " events)");

  // A call the backend refuses (max of complex numbers): an error naming
  // the group, not a bare LibTorch one, and observers that saw it start
  // also see it end.
  at::Tensor complex = at::ones({4}, at::kComplexFloat);
  expect_error("all_reduce max of a complex tensor", group, [&] { comm->all_reduce(complex, ReduceOp::max); });
  expect(observer.completed.size() == observer.enqueued.size(),
         "all_reduce max of a complex tensor: " + std::to_string(observer.enqueued.size()) + " enqueued event(s) but " +
             std::to_string(observer.completed.size()) + " completed");
  const uint64_t next_sequence = observer.enqueued.size();
  observer.enqueued.clear();
  observer.completed.clear();

  // Nothing reached the backend, so the group is still in step everywhere.
  at::Tensor ones = at::ones({3});
  comm->all_reduce(ones, ReduceOp::sum);
  expect_equal("all_reduce after the rejected calls", ones, at::full({3}, static_cast<double>(n)));
  expect(observer.enqueued.size() == 1 && observer.enqueued[0].sequence == next_sequence,
         "the first collective after the rejected calls does not have sequence " + std::to_string(next_sequence));
  titan::clear_comm_observers();
}

// ---------------------------------------------------------------------------
// Observers

std::string event_text(const titan::CollectiveEvent& event) {
  return event.op + " #" + std::to_string(event.sequence) + " on '" + event.group + "' ranks " +
         ranks_text(event.group_ranks) + " " + event.dtype + " " + std::to_string(event.bytes) + " bytes at '" +
         event.call_site + "'";
}

void check_observer(titan::DistRuntime& runtime) {
  std::vector<int> everyone;
  for (int rank = 0; rank < runtime.world().world_size; ++rank) everyone.push_back(rank);
  auto comm = runtime.new_group("observed", everyone);
  const int me = comm->rank();
  CountingObserver observer;
  titan::add_comm_observer(&observer);

  struct Expected {
    std::string op, dtype;
    std::vector<std::vector<int64_t>> shapes;
    int64_t bytes;
  };
  const std::vector<Expected> expected = {
      {"all_reduce", "Float", {{3, 5}}, 3 * 5 * 4},
      {"all_gather", "BFloat16", {{2, 3}}, 2 * 3 * 2},
      {"broadcast", "Long", {{4}}, 4 * 8},
  };
  expect(titan::CallSite::current().empty(), "the call site is not empty outside any CallSite scope");
  {
    titan::CallSite site("step 7 / observer check");
    at::Tensor a = rank_input(me, {3, 5}, at::kFloat);
    comm->all_reduce(a);
    {
      titan::CallSite inner("inner scope");
      expect(titan::CallSite::current() == "step 7 / observer check / inner scope",
             "a nested CallSite does not add its text to the outer one");
    }
    expect(titan::CallSite::current() == "step 7 / observer check", "a nested CallSite did not restore the outer one");
    std::string other_thread_site = "unset";
    std::thread([&] { other_thread_site = titan::CallSite::current(); }).join();
    expect(other_thread_site.empty(), "another thread sees this thread's call site '" + other_thread_site + "'");
    comm->all_gather(rank_bits(me, {2, 3}));
    at::Tensor c = rank_input(me, {4}, at::kLong);
    comm->broadcast(c, 0);
  }
  expect(titan::CallSite::current().empty(), "the call site was not cleared when its scope ended");

  const size_t count = expected.size();
  if (observer.enqueued.size() != count || observer.started.size() != count || observer.completed.size() != count) {
    report.fail("observer saw " + std::to_string(observer.enqueued.size()) + " enqueued, " +
                std::to_string(observer.started.size()) + " started, " + std::to_string(observer.completed.size()) +
                " completed events for 3 collectives");
  } else {
    for (size_t i = 0; i < count; ++i) {
      const auto& event = observer.enqueued[i];
      const auto& want = expected[i];
      std::string what = "event " + std::to_string(i) + " (" + event_text(event) + ")";
      expect(event.sequence == i, what + ": sequence is not " + std::to_string(i));
      expect(event.op == want.op, what + ": op is not " + want.op);
      expect(event.group == "observed", what + ": group is not 'observed'");
      expect(event.group_ranks == everyone, what + ": group ranks are not " + ranks_text(everyone));
      expect(event.shapes == want.shapes, what + ": shapes differ from the input's");
      expect(event.dtype == want.dtype, what + ": dtype is not " + want.dtype);
      expect(event.bytes == want.bytes, what + ": bytes are not " + std::to_string(want.bytes));
      expect(event.call_site == "step 7 / observer check", what + ": call site is not 'step 7 / observer check'");
      const auto& done = observer.completed[i];
      expect(observer.completed_ok[i], what + ": completed with ok = false");
      expect(done.sequence == event.sequence && done.op == event.op,
             what + ": completion #" + std::to_string(i) + " is " + event_text(done));
      expect(observer.started[i].sequence == event.sequence, what + ": start event out of order");
      expect(done.time_s >= event.time_s, what + ": completed before it was enqueued");
    }
  }

  // Async: enqueued when started, completed only by wait().
  at::Tensor d = rank_input(me, {6}, at::kDouble);
  auto work = comm->all_reduce_async(d, ReduceOp::max);
  expect(observer.enqueued.size() == count + 1 && observer.enqueued.back().sequence == count &&
             observer.enqueued.back().call_site.empty(),
         "all_reduce_async was not shown as enqueued #3 with an empty call site");
  expect(observer.completed.size() == count, "all_reduce_async completed before wait()");
  work->wait();
  expect(observer.completed.size() == count + 1 && observer.completed.back().sequence == count &&
             observer.completed_ok.back(),
         "wait() did not complete all_reduce_async #3");

  // Other groups count on their own: on the world group, consecutive calls
  // have consecutive sequence numbers whatever ran on it before.
  at::Tensor e = at::ones({1});
  runtime.world_group().all_reduce(e);
  runtime.world_group().barrier();
  expect(observer.enqueued.size() == count + 3, "the world group's calls were not observed");
  if (observer.enqueued.size() == count + 3) {
    const auto& first = observer.enqueued[count + 1];
    const auto& second = observer.enqueued[count + 2];
    expect(first.group == "world" && second.group == "world" && second.op == "barrier" && second.bytes == 0,
           "world events are " + event_text(first) + " and " + event_text(second));
    expect(second.sequence == first.sequence + 1,
           "world sequence numbers " + std::to_string(first.sequence) + " then " + std::to_string(second.sequence));
  }
  // send/recv tell the peer as a global rank (this group lists the ranks
  // backwards, so group and global ranks differ) and the tag; collectives none.
  expect(observer.enqueued.size() > count && observer.enqueued[count].peer == -1,
         "a collective's event names a peer");
  if (everyone.size() > 1) {
    std::vector<int> backwards(everyone.rbegin(), everyone.rend());
    auto ring = runtime.new_group("observed_p2p", backwards);
    const int n = ring->size(), mine = ring->rank(), next = (mine + 1) % n, previous = (mine + n - 1) % n;
    at::Tensor outgoing = at::ones({2}), incoming = at::empty({2});
    const size_t before = observer.enqueued.size();
    auto sent = ring->send_async(outgoing, next, 7);
    auto received = ring->recv_async(incoming, previous, 7);
    sent->wait();
    received->wait();
    expect(observer.enqueued.size() == before + 2, "send_async and recv_async were not observed");
    if (observer.enqueued.size() == before + 2) {
      const auto& send = observer.enqueued[before];
      const auto& recv = observer.enqueued[before + 1];
      expect(send.op == "send" && send.peer == backwards[static_cast<size_t>(next)] && send.tag == 7,
             event_text(send) + ": peer " + std::to_string(send.peer) + " tag " + std::to_string(send.tag) +
                 ", expected send to global rank " + std::to_string(backwards[static_cast<size_t>(next)]) +
                 " tag 7");
      expect(recv.op == "recv" && recv.peer == backwards[static_cast<size_t>(previous)] && recv.tag == 7,
             event_text(recv) + ": peer " + std::to_string(recv.peer) + " tag " + std::to_string(recv.tag) +
                 ", expected recv from global rank " + std::to_string(backwards[static_cast<size_t>(previous)]) +
                 " tag 7");
    }
  }
  const size_t seen = observer.enqueued.size();
  titan::clear_comm_observers();
  at::Tensor f = at::ones({1});
  comm->all_reduce(f);
  expect(observer.enqueued.size() == seen, "an observer still saw calls after clear_comm_observers");
}

// ---------------------------------------------------------------------------
// Autograd collectives: forward against the definition, backward against
// the documented adjoint, for a per-rank upstream gradient g_r.

at::Tensor cat_over_ranks(int n, int64_t dim, const std::function<at::Tensor(int)>& part_of) {
  std::vector<at::Tensor> parts;
  for (int rank = 0; rank < n; ++rank) parts.push_back(part_of(rank));
  return at::cat(parts, dim);
}

at::Tensor sum_over_ranks(int n, const std::function<at::Tensor(int)>& term_of) {
  at::Tensor sum = term_of(0).clone();
  for (int rank = 1; rank < n; ++rank) sum += term_of(rank);
  return sum;
}

void check_autograd(titan::DistRuntime& runtime) {
  Comm& comm = runtime.world_group();
  const int me = comm.rank(), n = comm.size();
  const auto dtype = at::kFloat;
  auto leaf = [&](int rank, at::IntArrayRef shape, int salt) {
    return rank_input(rank, shape, dtype, salt).requires_grad_(true);
  };
  auto upstream = [&](int rank, at::IntArrayRef shape) { return rank_input(rank, shape, dtype, 40); };

  for (int64_t dim : {0, 1}) {
    const std::string on = " along dim " + std::to_string(dim);
    // all_gather: y = cat_r x_r; x.grad = sum_r (g_r's slice of this rank).
    {
      auto x_of = [&](int rank) { return rank_input(rank, {2, 3}, dtype, 20); };
      at::Tensor x = leaf(me, {2, 3}, 20);
      at::Tensor y = titan::all_gather_autograd(x, comm, dim);
      expect_equal("all_gather_autograd forward" + on, y, cat_over_ranks(n, dim, x_of));
      auto shape = y.sizes().vec();
      y.backward(upstream(me, shape));
      const int64_t width = x.size(dim);
      expect_equal("all_gather_autograd backward" + on, x.grad(),
                   sum_over_ranks(n, [&](int rank) { return upstream(rank, shape).narrow(dim, me * width, width); }));
    }
    // reduce_scatter: y = (sum_r x_r)'s slice of this rank; x.grad = cat_r g_r.
    {
      std::vector<int64_t> shape = dim == 0 ? std::vector<int64_t>{2 * n, 3} : std::vector<int64_t>{3, 2 * n};
      at::Tensor x = leaf(me, shape, 21);
      at::Tensor y = titan::reduce_scatter_autograd(x, comm, dim);
      expect_equal("reduce_scatter_autograd forward" + on, y, sum_over_ranks(n, [&](int rank) {
                                                                return rank_input(rank, shape, dtype, 21);
                                                              }).narrow(dim, 2 * me, 2));
      auto y_shape = y.sizes().vec();
      y.backward(upstream(me, y_shape));
      expect_equal("reduce_scatter_autograd backward" + on, x.grad(),
                   cat_over_ranks(n, dim, [&](int rank) { return upstream(rank, y_shape); }));
    }
    // all_to_all, split along dim, concatenated along the other dim and
    // along the same dim: y_me = cat_s (x_s's block me); the adjoint is the
    // inverse exchange: x.grad = cat_r (g_r's block me), split and concat
    // dims swapped.
    for (int64_t concat : {1 - dim, dim}) {
      const std::string dims = " split " + std::to_string(dim) + " concat " + std::to_string(concat);
      std::vector<int64_t> shape = dim == 0 ? std::vector<int64_t>{2 * n, 3} : std::vector<int64_t>{3, 2 * n};
      auto x_of = [&](int rank) { return rank_input(rank, shape, dtype, 22); };
      at::Tensor x = leaf(me, shape, 22);
      at::Tensor y = titan::all_to_all_autograd(x, comm, dim, concat);
      expect_equal("all_to_all_autograd forward" + dims, y,
                   cat_over_ranks(n, concat, [&](int sender) { return x_of(sender).chunk(n, dim)[me]; }));
      auto y_shape = y.sizes().vec();
      y.backward(upstream(me, y_shape));
      expect_equal("all_to_all_autograd backward" + dims, x.grad(),
                   cat_over_ranks(n, dim, [&](int rank) { return upstream(rank, y_shape).chunk(n, concat)[me]; }));
    }
  }
  // all_to_all_v: uneven rows; the adjoint sends each gradient row back to
  // the rank its input row came from: x.grad = the upstream rows every rank
  // received from me, in the order I sent them.
  {
    auto send_of = [&](int sender) { return uneven_sends(sender, n); };
    auto recv_of = [&](int receiver) { return uneven_receives(receiver, n); };
    auto x_of = [&](int rank) { return rank_input(rank, {split_total(send_of(rank)), 3}, dtype, 24); };
    at::Tensor x = x_of(me).requires_grad_(true);
    at::Tensor y = titan::all_to_all_v_autograd(x, comm, send_of(me), recv_of(me));
    expect_equal("all_to_all_v_autograd forward", y, uneven_exchanged(n, me, send_of, x_of));
    auto g_of = [&](int rank) { return rank_input(rank, {split_total(recv_of(rank)), 3}, dtype, 41); };
    (y * g_of(me)).sum().backward();
    expect_equal("all_to_all_v_autograd backward", x.grad(), uneven_exchanged(n, me, recv_of, g_of));
  }
  // all_reduce: y = sum_r x_r; backward is the identity (documented: the
  // output is replicated and so is its gradient), x.grad = g_me.
  {
    at::Tensor x = leaf(me, {2, 3}, 23);
    at::Tensor y = titan::all_reduce_autograd(x, comm);
    expect_equal("all_reduce_autograd forward", y, sum_over_ranks(n, [&](int rank) {
                   return rank_input(rank, {2, 3}, dtype, 23);
                 }));
    expect_equal("all_reduce_autograd left its input unchanged", x.detach(), rank_input(me, {2, 3}, dtype, 23));
    y.backward(upstream(me, {2, 3}));
    expect_equal("all_reduce_autograd backward (identity)", x.grad(), upstream(me, {2, 3}));
  }
  // replicate_to_parallel: y = x; x.grad = sum_r g_r.
  {
    at::Tensor x = leaf(me, {2, 3}, 24);
    at::Tensor y = titan::replicate_to_parallel(x, comm);
    expect_equal("replicate_to_parallel forward", y, rank_input(me, {2, 3}, dtype, 24));
    y.backward(upstream(me, {2, 3}));
    expect_equal("replicate_to_parallel backward", x.grad(), sum_over_ranks(n, [&](int rank) {
                   return upstream(rank, {2, 3});
                 }));
  }

  // The pieces composed as tensor parallelism uses them, against one
  // process computing the whole thing (float64, random values).
  auto random = [](at::IntArrayRef shape, int seed) {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
    return at::randn(shape, generator, at::TensorOptions(at::kDouble));
  };
  const int64_t hidden = 4 * n;
  const int64_t slice = hidden / n;
  at::Tensor x_full = random({2 * n, 6}, 1), w_full = random({6, hidden}, 2), v_full = random({hidden, 5}, 3);
  at::Tensor g_full = random({2 * n, 5}, 4);
  auto reference = [&](at::Tensor& x_grad, at::Tensor& w_grad, at::Tensor& v_grad) {
    at::Tensor x = x_full.clone().requires_grad_(true), w = w_full.clone().requires_grad_(true),
               v = v_full.clone().requires_grad_(true);
    at::mm(at::mm(x, w), v).backward(g_full);
    x_grad = x.grad(), w_grad = w.grad(), v_grad = v.grad();
  };
  at::Tensor x_ref, w_ref, v_ref;
  reference(x_ref, w_ref, v_ref);
  auto shards = [&](at::Tensor& w, at::Tensor& v) {
    w = w_full.narrow(1, me * slice, slice).clone().requires_grad_(true);
    v = v_full.narrow(0, me * slice, slice).clone().requires_grad_(true);
  };
  // Megatron MLP: replicated x -> f -> column-parallel w -> row-parallel v
  // -> g; every rank computes the same loss from the replicated output.
  {
    at::Tensor w, v;
    shards(w, v);
    at::Tensor x = x_full.clone().requires_grad_(true);
    at::Tensor out = titan::all_reduce_autograd(at::mm(at::mm(titan::replicate_to_parallel(x, comm), w), v), comm);
    expect_equal("tensor-parallel MLP forward", out, at::mm(at::mm(x_full, w_full), v_full), 1e-12);
    out.backward(g_full);
    expect_equal("tensor-parallel MLP: x.grad", x.grad(), x_ref, 1e-12);
    expect_equal("tensor-parallel MLP: column shard w.grad", w.grad(), w_ref.narrow(1, me * slice, slice), 1e-12);
    expect_equal("tensor-parallel MLP: row shard v.grad", v.grad(), v_ref.narrow(0, me * slice, slice), 1e-12);
  }
  // Sequence parallel: x's rows sharded -> all_gather -> w -> v ->
  // reduce_scatter back to rows; each rank's loss covers its own rows.
  {
    at::Tensor w, v;
    shards(w, v);
    at::Tensor x = x_full.narrow(0, 2 * me, 2).clone().requires_grad_(true);
    at::Tensor out =
        titan::reduce_scatter_autograd(at::mm(at::mm(titan::all_gather_autograd(x, comm, 0), w), v), comm, 0);
    expect_equal("sequence-parallel MLP forward", out, at::mm(at::mm(x_full, w_full), v_full).narrow(0, 2 * me, 2),
                 1e-12);
    out.backward(g_full.narrow(0, 2 * me, 2));
    expect_equal("sequence-parallel MLP: x.grad (own rows)", x.grad(), x_ref.narrow(0, 2 * me, 2), 1e-12);
    expect_equal("sequence-parallel MLP: column shard w.grad", w.grad(), w_ref.narrow(1, me * slice, slice), 1e-12);
    expect_equal("sequence-parallel MLP: row shard v.grad", v.grad(), v_ref.narrow(0, me * slice, slice), 1e-12);
  }
}

// ---------------------------------------------------------------------------
// DeviceMesh: row-major over pp, dp_replicate, dp_shard, cp, tp.

const std::vector<std::string> kDims = {"pp", "dp_replicate", "dp_shard", "cp", "tp"};

std::vector<std::string> members_of(const std::string& name) {
  if (name == "dp") return {"dp_replicate", "dp_shard"};
  if (name == "dp_shard_cp") return {"dp_shard", "cp"};
  if (name == "dp_cp") return {"dp_replicate", "dp_shard", "cp"};
  if (name == "dp_shard_cp_tp") return {"dp_shard", "cp", "tp"};
  if (name == "world") return kDims;
  return {name};
}

// Coordinates of `rank`: row-major, tp fastest.
std::map<std::string, int64_t> coordinates_of(int rank, const std::map<std::string, int64_t>& degrees) {
  std::map<std::string, int64_t> coordinates;
  int64_t rest = rank;
  for (auto dim = kDims.rbegin(); dim != kDims.rend(); ++dim) {
    coordinates[*dim] = rest % degrees.at(*dim);
    rest /= degrees.at(*dim);
  }
  return coordinates;
}

void check_one_mesh(titan::DistRuntime& runtime, std::map<std::string, int64_t> degrees, const std::string& label) {
  const int me = runtime.world().rank, world_size = runtime.world().world_size;
  titan::DeviceMesh mesh(runtime, degrees);
  for (const auto& dim : kDims) degrees.emplace(dim, 1);
  auto mine = coordinates_of(me, degrees);
  expect(mesh.world_size() == world_size, label + ": world_size() is " + std::to_string(mesh.world_size()));

  for (const std::string name : {"pp", "dp_replicate", "dp_shard", "cp", "tp", "dp", "dp_shard_cp", "dp_cp", "dp_shard_cp_tp", "world"}) {
    const std::string what = label + " dim " + name;
    auto members = members_of(name);
    int64_t size = 1, coordinate = 0;
    for (const auto& dim : members) {
      size *= degrees.at(dim);
      coordinate = coordinate * degrees.at(dim) + mine.at(dim);
    }
    // The slice: every rank that agrees with this one on the other dims,
    // in rank order (row-major keeps the slice's own order).
    std::vector<int> slice;
    for (int rank = 0; rank < world_size; ++rank) {
      auto theirs = coordinates_of(rank, degrees);
      bool same_slice = true;
      for (const auto& dim : kDims) {
        if (std::find(members.begin(), members.end(), dim) == members.end() && theirs.at(dim) != mine.at(dim)) {
          same_slice = false;
        }
      }
      if (same_slice) slice.push_back(rank);
    }
    expect(mesh.size(name) == size,
           what + ": size() " + std::to_string(mesh.size(name)) + ", expected " + std::to_string(size));
    expect(mesh.coordinate(name) == coordinate, what + ": coordinate() " + std::to_string(mesh.coordinate(name)) +
                                                    ", expected " + std::to_string(coordinate));
    Comm& group = mesh.group(name);
    expect(group.size() == size && group.rank() == coordinate,
           what + ": group rank " + std::to_string(group.rank()) + " of " + std::to_string(group.size()) +
               ", expected " + std::to_string(coordinate) + " of " + std::to_string(size));
    expect(group.global_ranks() == slice, what + ": group '" + group.name() + "' has global ranks " +
                                              ranks_text(group.global_ranks()) + ", expected " + ranks_text(slice));
    int64_t expected_sum = 0;
    for (int rank : slice) expected_sum += rank;
    at::Tensor sum = at::full({1}, me, at::kLong);
    group.all_reduce(sum, ReduceOp::sum);
    expect(sum.item<int64_t>() == expected_sum, what + ": all_reduce of the global rank gives " +
                                                    std::to_string(sum.item<int64_t>()) + ", expected the sum of " +
                                                    ranks_text(slice) + " = " + std::to_string(expected_sum));
    at::Tensor gathered = group.all_gather(at::full({1}, me, at::kLong));
    std::vector<int64_t> order(gathered.data_ptr<int64_t>(), gathered.data_ptr<int64_t>() + gathered.numel());
    expect(order == std::vector<int64_t>(slice.begin(), slice.end()),
           what + ": all_gather of the global rank is not in the order " + ranks_text(slice));
  }
  std::string unknown = error_of(label + ": group(\"bogus\")", [&] { mesh.group("bogus"); });
  expect(unknown.empty() || unknown.find("bogus") != std::string::npos,
         label + ": the unknown-dim error does not name the dim: " + unknown);
}

void check_mesh_hsdp(titan::DistRuntime& runtime) {
  check_one_mesh(runtime, {{"dp_replicate", 2}, {"dp_shard", runtime.world().world_size / 2}},
                 "mesh dp_replicate x dp_shard");
}

void check_mesh_tp(titan::DistRuntime& runtime) {
  check_one_mesh(runtime, {{"dp_shard", runtime.world().world_size / 2}, {"tp", 2}}, "mesh dp_shard x tp");
}

// A plugin's split of dp_shard_cp (4 ranks) into efsdp x ep with ep 2 (expert
// parallelism's sparse mesh): ep pairs consecutive ranks, efsdp those with
// the same position in their pair; real groups whose collectives reach
// exactly those ranks.
titan::TensorLayout row_sharded(const std::vector<int64_t>& shape, int64_t ranks, int64_t rank,
                                const std::string& mesh_dim);

void check_mesh_ep(titan::DistRuntime& runtime) {
  const int me = runtime.world().rank;
  expect(runtime.world().world_size == 4, "mesh_ep runs on 4 ranks");
  titan::DeviceMesh mesh(runtime, {{"dp_shard", 4}}, {{"dp_shard_cp", "efsdp", "ep", 2}});
  const std::map<std::string, std::vector<int>> expected = {{"ep", {me / 2 * 2, me / 2 * 2 + 1}},
                                                             {"efsdp", {me % 2, me % 2 + 2}}};
  const std::map<std::string, int64_t> coordinate = {{"ep", me % 2}, {"efsdp", me / 2}};
  for (const auto& [name, slice] : expected) {
    Comm& group = mesh.group(name);
    expect(mesh.size(name) == 2 && mesh.coordinate(name) == coordinate.at(name),
           "mesh_ep " + name + ": size " + std::to_string(mesh.size(name)) + " coordinate " +
               std::to_string(mesh.coordinate(name)));
    expect(group.global_ranks() == slice, "mesh_ep " + name + ": group has global ranks " +
                                              ranks_text(group.global_ranks()) + ", expected " + ranks_text(slice));
    at::Tensor sum = at::full({1}, me, at::kLong);
    group.all_reduce(sum, ReduceOp::sum);
    expect(sum.item<int64_t>() == slice[0] + slice[1],
           "mesh_ep " + name + ": all_reduce of the global rank gives " + std::to_string(sum.item<int64_t>()));
  }
  expect(mesh.group("dp_shard").size() == 4, "mesh_ep: the dense dp_shard group is unchanged");
  // Experts: 4 rows sharded over ep (2 each) are copied on the 2 efsdp ranks;
  // then sharded over efsdp too, on one rank each; a dense weight on all 4.
  titan::TensorLayout experts = row_sharded({4, 3}, 2, me % 2, "ep");
  expect(experts.replication(mesh) == 2, "mesh_ep: S(0) over ep has " + std::to_string(experts.replication(mesh)) +
                                             " copies, expected 2 (the efsdp ranks)");
  expect(experts.is_first_copy(mesh) == (me / 2 == 0), "mesh_ep: S(0) over ep: first copy on efsdp coordinate 0");
  experts.mesh_dims.insert(experts.mesh_dims.begin(), "efsdp");
  experts.placements.insert(experts.placements.begin(), titan::Placement::shard(0));
  expect(experts.replication(mesh) == 1 && experts.is_first_copy(mesh),
         "mesh_ep: S(0) over efsdp and ep has " + std::to_string(experts.replication(mesh)) + " copies, expected 1");
  expect(titan::TensorLayout::replicated({4, 3}).replication(mesh) == 4, "mesh_ep: a replicated tensor has 4 copies");
}

// ---------------------------------------------------------------------------
// Layouts: full_tensor / local_piece / even_row_shard.

at::Tensor global_tensor(at::IntArrayRef shape) { return rank_input(0, shape, at::kFloat, 30); }

titan::TensorLayout row_sharded(const std::vector<int64_t>& shape, int64_t ranks, int64_t rank,
                                const std::string& mesh_dim) {
  titan::RowRange rows = titan::even_row_shard(shape[0], ranks, rank);
  titan::TensorLayout layout;
  layout.global_shape = shape;
  layout.local_offset = {rows.begin, 0};
  layout.local_shape = {rows.length, shape[1]};
  layout.mesh_dims = {mesh_dim};
  layout.placements = {titan::Placement::shard(0)};
  return layout;
}

void check_layout(titan::DistRuntime& runtime) {
  const int me = runtime.world().rank, n = runtime.world().world_size;
  titan::DeviceMesh mesh(runtime, {{"dp_shard", n}});
  // 5 rows over n ranks: ceil(5/n) each, the last ones fewer or none.
  const std::vector<int64_t> shape{5, 3};
  at::Tensor global = global_tensor(shape);
  {
    auto layout = row_sharded(shape, n, me, "dp_shard");
    const int64_t chunk = (5 + n - 1) / n;
    const int64_t begin = std::min<int64_t>(5, me * chunk), end = std::min<int64_t>(5, begin + chunk);
    expect(layout.local_offset[0] == begin && layout.local_shape[0] == end - begin,
           "even_row_shard(5, " + std::to_string(n) + ", " + std::to_string(me) + ") is rows [" +
               std::to_string(layout.local_offset[0]) + ", +" + std::to_string(layout.local_shape[0]) +
               "), expected [" + std::to_string(begin) + ", " + std::to_string(end) + ")");
    at::Tensor local = titan::local_piece(global, layout);
    expect_equal("local_piece S(0) [5, 3]", local, global.narrow(0, begin, end - begin));
    expect_equal("full_tensor S(0) [5, 3] over dp_shard (" + std::to_string(end - begin) + " local rows)",
                 titan::full_tensor(local.clone(), layout, mesh), global);
  }
  // Shard(1): columns [3r, 3r+3) of a [2, 3n] tensor.
  {
    const std::vector<int64_t> wide{2, 3 * n};
    at::Tensor full = global_tensor(wide);
    titan::TensorLayout layout;
    layout.global_shape = wide;
    layout.local_offset = {0, 3 * me};
    layout.local_shape = {2, 3};
    layout.mesh_dims = {"dp_shard"};
    layout.placements = {titan::Placement::shard(1)};
    at::Tensor local = titan::local_piece(full, layout);
    expect_equal("local_piece S(1)", local, full.narrow(1, 3 * me, 3));
    expect_equal("full_tensor S(1) over dp_shard", titan::full_tensor(local.clone(), layout, mesh), full);
  }
  // Partial: the full tensor is the sum of the local ones.
  {
    auto layout = titan::TensorLayout::replicated(shape);
    layout.mesh_dims = {"dp_shard"};
    layout.placements = {titan::Placement::partial()};
    expect_equal("full_tensor P over dp_shard (sum)",
                 titan::full_tensor(rank_input(me, shape, at::kFloat), layout, mesh),
                 sum_over_ranks(n, [&](int rank) { return rank_input(rank, shape, at::kFloat); }));
  }
  // Redistribute: Shard(0) rows -> Shard(1) columns -> Replicate.
  {
    const std::vector<int64_t> square{2 * n, 2 * n};
    at::Tensor full = global_tensor(square);
    auto rows = row_sharded(square, n, me, "dp_shard");
    titan::TensorLayout columns;
    columns.global_shape = square;
    columns.local_offset = {0, 2 * me};
    columns.local_shape = {2 * n, 2};
    columns.mesh_dims = {"dp_shard"};
    columns.placements = {titan::Placement::shard(1)};
    at::Tensor mine = titan::redistribute(titan::local_piece(full, rows).clone(), rows, columns, mesh);
    expect_equal("redistribute S(0) -> S(1)", mine, full.narrow(1, 2 * me, 2));
    auto whole = titan::TensorLayout::replicated(square);
    whole.mesh_dims = {"dp_shard"};
    whole.placements = {titan::Placement::replicate()};
    expect_equal("redistribute S(1) -> R", titan::redistribute(mine, columns, whole, mesh), full);
  }
  // Replicate: already whole.
  {
    auto layout = titan::TensorLayout::replicated(shape);
    layout.mesh_dims = {"dp_shard"};
    layout.placements = {titan::Placement::replicate()};
    expect_equal("full_tensor R over dp_shard", titan::full_tensor(global.clone(), layout, mesh), global);
    expect(layout.replication(mesh) == n,
           "replication() of R over dp_shard is " + std::to_string(layout.replication(mesh)));
  }
}

// ---------------------------------------------------------------------------

const std::map<std::string, std::function<void(titan::DistRuntime&)>>& checks() {
  static const std::map<std::string, std::function<void(titan::DistRuntime&)>> all = {
      {"collectives", check_collectives},
      {"all_reduce", [](titan::DistRuntime& r) { check_all_reduce(r.world_group()); }},
      {"all_gather", [](titan::DistRuntime& r) { check_all_gather(r.world_group()); }},
      {"reduce_scatter", [](titan::DistRuntime& r) { check_reduce_scatter(r.world_group()); }},
      {"broadcast", [](titan::DistRuntime& r) { check_broadcast(r.world_group()); }},
      {"all_to_all", [](titan::DistRuntime& r) { check_all_to_all(r.world_group()); }},
      {"send_recv", [](titan::DistRuntime& r) { check_send_recv(r.world_group()); }},
      {"barrier", [](titan::DistRuntime& r) { check_barrier(r.world_group()); }},
      {"empty", [](titan::DistRuntime& r) { check_empty(r.world_group()); }},
      {"validation", check_validation},
      {"observer", check_observer},
      {"autograd", check_autograd},
      {"mesh_hsdp", check_mesh_hsdp},
      {"mesh_tp", check_mesh_tp},
      {"mesh_ep", check_mesh_ep},
      {"layout", check_layout},
  };
  return all;
}

std::vector<std::string> split_names(const std::string& text) {
  std::vector<std::string> names;
  std::stringstream stream(text);
  std::string name;
  while (std::getline(stream, name, ',')) {
    if (!name.empty()) names.push_back(name);
  }
  return names;
}

int usage() {
  std::string known;
  for (const auto& [name, check] : checks()) known += " " + name;
  std::fprintf(stderr, "usage: titan launch --nproc-per-node N -- titan_dist_checks NAME[,NAME...]\nchecks:%s\n",
               known.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return usage();
  std::vector<std::string> names = split_names(argv[1]);
  for (const auto& name : names) {
    if (!checks().count(name)) {
      std::fprintf(stderr, "titan_dist_checks: unknown check '%s'\n", name.c_str());
      return usage();
    }
  }
  // TITAN_DIST_CHECKS_TIMING=1: when each phase ended, on stderr.
  const auto start = std::chrono::steady_clock::now();
  const bool timing = std::getenv("TITAN_DIST_CHECKS_TIMING") != nullptr;
  auto mark = [&](const std::string& phase) {
    if (!timing) return;
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "timing: %s done at %.3f s after main\n", phase.c_str(), seconds);
  };
  // Each check's verdict as soon as it is known: a later hang keeps it.
  size_t printed = 0;
  auto print_new_failures = [&] {
    for (; printed < report.failures.size(); ++printed) {
      std::printf("CHECK FAILED: %s\n", report.failures[printed].c_str());
    }
    std::fflush(stdout);
  };
  report.check = "setup";
  try {
    titan::World world = titan::detect_world();
    report.rank = world.rank;
    titan::init_logging(world.rank, "warn");
    at::set_num_threads(1);
    titan::DistTimeouts timeouts;
    timeouts.init = std::chrono::seconds(30);
    timeouts.collective = std::chrono::seconds(30);
    titan::DistRuntime runtime(world, timeouts);
    mark("rendezvous");
    for (const auto& name : names) {
      report.check = name;
      size_t failures_before = report.failures.size();
      checks().at(name)(runtime);
      if (report.failures.size() == failures_before) std::printf("CHECK %s ok\n", name.c_str());
      print_new_failures();
      mark(name);
    }
    // Nobody tears down its groups while a peer still uses them.
    report.check = "final barrier";
    runtime.world_group().barrier();
  } catch (const std::exception& error) {
    report.fail("exception: " + message_of(error));
  }
  print_new_failures();
  mark("exit");
  return report.failures.empty() ? 0 : 1;
}
