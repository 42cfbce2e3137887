#!/usr/bin/env bash
# The dry run's predictions against real runs on this machine: for each of
# the runs below, a real 2-step run (every rank's metrics file) and
# `titan plan` of the same config; prints a Markdown table of every rank's
# predicted and measured peak (the CPU memory tracker's max_active of step
# 2) and whether step 2's collectives equal the flight recorder's record.
# docs/planning.md shows its table. Usage: scripts/plan_vs_measured.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
titan=$build/bin/titan
work=$(mktemp -d /tmp/plan_vs_measured.XXXXXX)
port=29850
failed=0
small="--set training.steps=2 --set training.seq_len=128 --set training.local_batch_size=8 --set training.threads=1"
small+=" --set metrics.log_freq=1 --set metrics.enable_jsonl=true --set metrics.save_for_all_ranks=true"
fr="{name: flight_recorder, dump_on_exit: true}"
ac() { echo "{name: activation_checkpoint, mode: $1${2:+, selective_ac_option: \"$2\"}}"; }

# name | ranks | config | plugins (YAML list)
runs=(
  "one process|1|llama3_debugmodel.yaml|[]"
  "FSDP 2|2|llama3_debugmodel.yaml|[{name: fsdp}, $fr]"
  "HSDP 2x2|4|llama3_debugmodel.yaml|[{name: fsdp, dp_replicate: 2, dp_shard: 2}, $fr]"
  "TP 2|2|llama3_debugmodel.yaml|[{name: tensor_parallel, tensor_parallel_degree: 2}, $fr]"
  "FSDP 2 x TP 2|4|llama3_debugmodel.yaml|[{name: fsdp}, {name: tensor_parallel, tensor_parallel_degree: 2}, $fr]"
  "PP 2 1F1B|2|llama3_debugmodel.yaml|[{name: pipeline, pipeline_parallel_degree: 2, pipeline_parallel_schedule: 1F1B}, $fr]"
  "PP 2 Interleaved1F1B|2|llama3_debugmodel.yaml|[{name: pipeline, pipeline_parallel_degree: 2, pipeline_parallel_schedule: Interleaved1F1B}, $fr]"
  "CP 2 (FSDP)|2|llama3_debugmodel_cp.yaml|[{name: fsdp}, {name: context_parallel, context_parallel_degree: 2}, $fr]"
  "AC full|1|llama3_debugmodel.yaml|[$(ac full)]"
  "AC selective 2|1|llama3_debugmodel.yaml|[$(ac selective 2)]"
  "AC selective op|1|llama3_debugmodel.yaml|[$(ac selective op)]"
  "AC memory_budget 0.5|1|llama3_debugmodel.yaml|[{name: activation_checkpoint, mode: memory_budget, memory_budget: 0.5}]"
  "float8 tensorwise|1|llama3_debugmodel_float8.yaml|[{name: float8, recipe_name: tensorwise, filter_fqns: [output]}]"
  "DDP 2|2|llama3_debugmodel.yaml|[{name: ddp}, $fr]"
)

echo "| run | rank | predicted MiB | measured MiB | difference | peak at | collectives of step 2 |"
echo "|---|---|---|---|---|---|---|"
for run in "${runs[@]}"; do
  IFS='|' read -r name ranks config plugins <<<"$run"
  dump=$work/$(echo "$name" | tr ' ()' '___')
  sets="$small --set job.dump_folder=$dump"
  train="$titan train $root/configs/$config $sets --set 'plugins=$plugins'"
  if [ "$ranks" = 1 ]; then
    eval "$train" >"$dump.log" 2>&1 || { echo "| $name | - | real run failed: $dump.log |"; failed=1; continue; }
  else
    port=$((port + 1))
    eval "$titan launch --nproc-per-node $ranks --master-port $port -- $train" >"$dump.log" 2>&1 ||
      { echo "| $name | - | real run failed: $dump.log |"; failed=1; continue; }
  fi
  eval "$titan plan $root/configs/$config --world-size $ranks --every-rank --json $sets --set 'plugins=$plugins'" \
    >"$dump.plan.json" 2>"$dump.plan.log" || { echo "| $name | - | dry run failed: $dump.plan.log |"; failed=1; continue; }
  python3 - "$name" "$dump" <<'EOF'
import json, os, sys
name, dump = sys.argv[1], sys.argv[2]
plan = json.load(open(dump + ".plan.json"))
def signatures(events):
    return [(e["op"], e["group"], json.dumps(e["shapes"]), e["dtype"], e["bytes"], e.get("peer", -1))
            for e in events if e["call_site"].startswith("step 2")]
for rank in plan["ranks"]:
    r = rank["rank"]
    metrics = dump + ("/metrics.jsonl" if r == 0 else "/metrics.rank%d.jsonl" % r)
    measured = [json.loads(l) for l in open(metrics)]
    measured = [m for m in measured if m["step"] == 2][0]["memory/max_active(GiB)"] * 1024
    predicted = rank["peak_bytes"] / 2**20
    fr = dump + "/flight_recorder/rank_%d.json" % r
    if os.path.exists(fr):
        same = signatures(json.load(open(fr))["entries"]) == signatures(rank["collectives"])
        collectives = "%d, equal" % len(signatures(rank["collectives"])) if same else "DIFFER"
    else:
        collectives = "(one process)" if plan["world_size"] == 1 else "(no recorder)"
    where = rank["peak_at"].split(" (")[0]
    print("| %s | %d | %.2f | %.2f | %+.2f%% | %s | %s |" % (name, r, predicted, measured,
          100 * (predicted - measured) / measured, where, collectives))
EOF
done
if [ "$failed" = 0 ]; then rm -rf "$work"; else echo "logs of the failed runs: $work" >&2; fi

