// What FSDP all-gathers for one parameter in place of its high-precision
// rows, and how the whole parameter is rebuilt after the gather (FSDP2's
// fsdp_pre_all_gather / fsdp_post_all_gather): a layer that computes with a
// compressed copy of its weight (float8 codes and a scale) implements this,
// and FSDP asks every module of the model for it. Core owns the interface
// so the two plugins never include each other's headers.
#pragma once
#include <ATen/core/Tensor.h>

namespace titan {

class Comm;

class AllGatherExtension {
 public:
  virtual ~AllGatherExtension();
  // The parameter this module gathers its own way (matched by identity), or
  // an undefined tensor when it gathers nothing specially.
  virtual at::Tensor extended_parameter() const = 0;
  // The element type on the wire: one wire element per parameter element.
  virtual c10::ScalarType wire_dtype() const = 0;
  // This rank's rows (`shard`, the high-precision master rows) as wire
  // elements of the same shape. `group` is the group gathered over; every
  // rank calls this for the same parameters in the same order, so it may
  // run collectives on it (e.g. a MAX all-reduce of amaxes).
  virtual at::Tensor pre_all_gather(const at::Tensor& shard, Comm& group) = 0;
  // `gathered`: the whole parameter's wire elements (its unsharded shape).
  // Returns the values the module's parameter tensor holds until the next
  // reshard (in `dtype`), and keeps whatever the layer computes with.
  virtual at::Tensor post_all_gather(const at::Tensor& gathered, c10::ScalarType dtype) = 0;
};

}  // namespace titan
