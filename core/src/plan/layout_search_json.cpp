// The layout search's result as JSON (`titan plan --model ... --json`):
// the request, the device and model as planned, each top layout with its
// memory, estimate and config, and what was assumed. Sizes in bytes, times
// in seconds.
#include <nlohmann/json.hpp>

#include "titan/layout_search.hpp"

namespace titan {

namespace {

nlohmann::ordered_json mesh_json(const MeshShape& mesh) {
  return {{"pp", mesh.pp}, {"dp_replicate", mesh.dp_replicate}, {"dp_shard", mesh.dp_shard},
          {"cp", mesh.cp}, {"tp", mesh.tp},   {"ep", mesh.ep}};
}

nlohmann::ordered_json memory_json(const MemoryEstimate& memory) {
  return {{"total", memory.total()},         {"state", memory.state},
          {"gathered_params", memory.gathered_params}, {"activations", memory.activations},
          {"logits", memory.logits},         {"overhead", memory.overhead},
          {"pp_rank", memory.pp_rank}};
}

nlohmann::ordered_json plan_json(const LayoutPlan& plan) {
  const Layout& layout = plan.layout;
  const StepEstimate& estimate = plan.estimate;
  nlohmann::ordered_json comm = nlohmann::ordered_json::array();
  for (const auto& time : estimate.comm) {
    comm.push_back({{"dim", time.dim},
                    {"ranks", time.ranks},
                    {"within_node", time.within_node},
                    {"bytes_on_wire", time.bytes_on_wire},
                    {"seconds", time.seconds},
                    {"overlaps", time.overlap}});
  }
  return {
      {"layout", layout.mesh.to_string()},
      {"mesh", mesh_json(layout.mesh)},
      {"schedule", layout.schedule.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(layout.schedule)},
      {"local_batch_size", layout.local_batch_size},
      {"microbatch_size", layout.microbatch_size},
      {"microbatches", layout.microbatches},
      {"accumulation", layout.accumulation},
      {"activation_checkpoint", ac_mode_name(layout.ac)},
      {"float8", layout.float8},
      {"memory_bytes", memory_json(plan.memory)},
      {"estimate",
       {{"step_s", estimate.step_s},
        {"compute_s", estimate.compute_s},
        {"exposed_comm_s", estimate.exposed_comm_s},
        {"bubble_s", estimate.bubble_s},
        {"tokens_per_s", estimate.tokens_per_s},
        {"tokens_per_s_per_device", estimate.tokens_per_s_per_device},
        {"mfu", estimate.mfu},
        {"comm", comm}}},
      {"yaml", plan.yaml}};
}

}  // namespace

std::string search_result_json(const SearchResult& result) {
  const SearchRequest& request = result.request;
  const DeviceSpec& device = result.device;
  const ModelShape& model = result.model;
  nlohmann::ordered_json top = nlohmann::ordered_json::array();
  for (const auto& plan : result.top) top.push_back(plan_json(plan));
  nlohmann::ordered_json json = {
      {"request",
       {{"model", request.model},
        {"flavor", request.flavor},
        {"device", request.device},
        {"devices", request.devices},
        {"seq_len", request.seq_len},
        {"global_batch_tokens", request.global_batch_tokens},
        {"margin", request.margin}}},
      {"device",
       {{"name", device.name},
        {"description", device.description},
        {"memory_bytes", device.memory_bytes},
        {"bf16_flops", device.bf16_flops},
        {"fp8_flops", device.fp8_flops},
        {"fp32_flops", device.fp32_flops},
        {"hbm_bytes_per_s", device.hbm_bytes_per_s},
        {"intra_node_bytes_per_s", device.intra_node_bytes_per_s},
        {"inter_node_bytes_per_s", device.inter_node_bytes_per_s},
        {"devices_per_node", device.devices_per_node},
        {"source", device.source}}},
      {"model",
       {{"name", model.name},
        {"flavor", model.flavor},
        {"params", model.params},
        {"layers", model.layers},
        {"hidden", model.hidden},
        {"vocab", model.vocab},
        {"experts", model.experts},
        {"flops_per_token", model.flops_per_token}}},
      {"candidates", result.candidates},
      {"fitting", result.fitting},
      {"layouts", top},
      {"refused", result.refused},
      {"assumptions", result.assumptions}};
  if (result.nothing_fits.empty()) {
    json["nothing_fits"] = nullptr;
  } else {
    json["nothing_fits"] = {{"message", result.nothing_fits},
                            {"smallest", plan_json(result.smallest)},
                            {"memory_needed_bytes", result.memory_needed_bytes},
                            {"fewest_devices", result.fewest_devices}};
  }
  return json.dump(2) + "\n";
}

}  // namespace titan
