// The training step reads no tensor value on the host between log steps
// (debug.count_host_reads: a RecordFunction callback counts every
// aten::_local_scalar_dense, i.e. each .item(), and on CUDA every copy the
// host waits for). On a GPU each such read drains the device's queue. The
// copies (a CPU run has none) are checked on the meta device in
// tests/unit/host_to_device_test.cpp.
// Every layout below trains 6 steps logging every 3rd; on every rank the
// steps 4 and 5 (between the log steps 3 and 6) must read nothing. Step 1's
// window may read (pipeline shape headers are exchanged once). The check
// can fail: under on_nonfinite_loss: skip the step reads its finite flag
// every step by design, and the count and the warning naming the site show it.
#include "equivalence_runs.hpp"

#include <string>
#include <vector>

namespace {

struct CheckedLayout {
  std::string name;
  int ranks;
  std::string config, plugins, sets;
};

const std::string kQwen3Moe = " --set model.dim=64 --set model.n_layers=2 --set model.n_heads=4";

// The reads of the log window ending at `step` on every rank: [rank] -> count.
std::vector<double> window_reads(const std::filesystem::path& dump, int ranks, int step) {
  std::vector<double> reads;
  for (int rank = 0; rank < ranks; ++rank) {
    const std::string file = rank == 0 ? "metrics.jsonl" : "metrics.rank" + std::to_string(rank) + ".jsonl";
    std::istringstream lines(titan::test::read_file(dump / file));
    double found = -1;
    for (std::string line; std::getline(lines, line);) {
      auto record = nlohmann::json::parse(line);
      if (record["step"].get<int>() == step && record.contains("host_reads")) found = record["host_reads"].get<double>();
    }
    reads.push_back(found);
  }
  return reads;
}

titan::test::CommandResult train(const CheckedLayout& layout, const std::filesystem::path& dump, int port,
                                 const std::string& extra = "") {
  return titan::test::run_command(
      "timeout 300 " + titan::test::titan_binary() + " launch --nproc-per-node " + std::to_string(layout.ranks) +
      " --master-port " + std::to_string(port) + " --grace-period-s 5 -- " + titan::test::titan_binary() + " train " +
      titan::test::source_dir() + "/configs/" + layout.config + " --set training.steps=6 --set training.seq_len=64"
      " --set training.threads=1 --set metrics.log_freq=3 --set metrics.save_for_all_ranks=true"
      " --set debug.count_host_reads=true --set job.dump_folder=" + dump.string() + " --set 'plugins=[" +
      layout.plugins + "]'" + layout.sets + extra);
}

}  // namespace

TEST_CASE("the training step reads no tensor value on the host between log steps: one process (full AC, float8; "
          "fused kernels with selective AC; per-op AC; memory-budget AC; MoE), DDP, FSDP x TP (async) x loss "
          "parallel, HSDP, PP x FSDP, PP ZBVZeroBubble and DualPipeV, CP (ring, all-to-all rotation; Ulysses), MoE "
          "with FSDP x EP") {
  const std::string small = titan::test::kSmallModel;
  const std::vector<CheckedLayout> layouts = {
      {"one_ac_float8", 1, "llama3_debugmodel.yaml", "{name: activation_checkpoint, mode: full}, {name: float8}",
       small + " --set training.local_batch_size=8"},
      // AdamW foreach: ATen's CPU fused AdamW reads each step count (a host
      // tensor) inside its kernel, which no CUDA kernel does.
      {"one_fused_kernels", 1, "llama3_debugmodel.yaml",
       "{name: fused_kernels}, {name: activation_checkpoint, mode: selective}",
       small + " --set training.local_batch_size=8"},
      {"one_ac_op", 1, "llama3_debugmodel.yaml", "{name: activation_checkpoint, mode: selective, selective_ac_option: op}",
       small + " --set training.local_batch_size=8"},
      {"one_ac_budget", 1, "llama3_debugmodel.yaml",
       "{name: activation_checkpoint, mode: memory_budget, memory_budget: 0.5}",
       small + " --set training.local_batch_size=8"},
      {"one_moe", 1, "qwen3_debugmodel_moe.yaml", "", kQwen3Moe + " --set training.local_batch_size=8"},
      {"ddp", 2, "llama3_debugmodel.yaml", "{name: ddp}", small + " --set training.local_batch_size=4"},
      {"fsdp_tp_lp", 4, "llama3_debugmodel.yaml",
       "{name: fsdp, dp_shard: 2}, {name: tensor_parallel, tensor_parallel_degree: 2, enable_async_tensor_parallel: "
       "true}, {name: loss_parallel}",
       small + " --set training.local_batch_size=4"},
      {"hsdp", 4, "llama3_debugmodel.yaml", "{name: fsdp, dp_shard: 2, dp_replicate: 2}",
       small + " --set training.local_batch_size=2"},
      {"pp_fsdp", 4, "llama3_debugmodel.yaml",
       "{name: fsdp, dp_shard: 2}, {name: pipeline, pipeline_parallel_degree: 2, pipeline_parallel_microbatch_size: 2}",
       small + " --set training.local_batch_size=4"},
      // The zero-bubble split backward (W from I's kept gradients) and the V schedules.
      {"pp_zbv", 2, "llama3_debugmodel.yaml",
       "{name: pipeline, pipeline_parallel_degree: 2, pipeline_parallel_schedule: ZBVZeroBubble, "
       "num_pp_microbatches: 4}",
       small + " --set training.local_batch_size=8"},
      {"pp_dualpipev", 2, "llama3_debugmodel.yaml",
       "{name: pipeline, pipeline_parallel_degree: 2, pipeline_parallel_schedule: DualPipeV, num_pp_microbatches: 4}",
       small + " --set training.local_batch_size=8"},
      {"cp_ring", 2, "llama3_debugmodel.yaml",
       "{name: fsdp, dp_shard: 1}, {name: context_parallel, context_parallel_degree: 2, "
       "context_parallel_rotate_method: alltoall}",
       small + " --set training.local_batch_size=8"},
      {"cp_ulysses", 2, "llama3_debugmodel.yaml",
       "{name: fsdp, dp_shard: 1}, {name: context_parallel, context_parallel_degree: 2, "
       "context_parallel_method: ulysses}",
       small + " --set training.local_batch_size=8"},
      {"moe_fsdp_ep", 2, "qwen3_debugmodel_moe_ep.yaml",
       "{name: fsdp, dp_shard: 2}, {name: expert_parallel, expert_parallel_degree: 2}",
       kQwen3Moe + " --set training.local_batch_size=4"},
  };
  int port = 29361;
  for (const auto& layout : layouts) {
    INFO(layout.name);
    auto dump = titan::test::temp_dir("host_reads_" + layout.name);
    auto result = train(layout, dump, port);
    port += 2;
    REQUIRE_MESSAGE(result.exit_code == 0, result.output);
    INFO(result.output);  // on a failure: the warning naming each read's op, call site and Titan frames
    const auto reads = window_reads(dump, layout.ranks, 6);
    for (int rank = 0; rank < layout.ranks; ++rank) CHECK_MESSAGE(reads[rank] == 0, "rank ", rank);
  }
}

TEST_CASE("the host-read count fails a step that reads: on_nonfinite_loss: skip reads its finite flag once a step, "
          "and the warning names the step and the step's frame") {
  const CheckedLayout one{"skip", 1, "llama3_debugmodel.yaml", "",
                   titan::test::kSmallModel + " --set training.local_batch_size=8"};
  auto dump = titan::test::temp_dir("host_reads_skip");
  auto result = train(one, dump, 29391, " --set training.on_nonfinite_loss=skip");
  REQUIRE_MESSAGE(result.exit_code == 0, result.output);
  CHECK(window_reads(dump, 1, 6)[0] == 2);  // steps 4 and 5, one read each
  CHECK_MESSAGE(titan::test::has(result.output, "step 4: 1 host read(s) of tensor values on a step that does not log"),
                result.output);
  CHECK_MESSAGE(titan::test::has(result.output, "aten::_local_scalar_dense at 'step 4' from "
                                                "titan::host_value<bool>(at::Tensor const&) <- titan::run_training_step"),
                result.output);
}
