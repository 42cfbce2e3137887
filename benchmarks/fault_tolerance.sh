#!/usr/bin/env bash
# Fault tolerance (docs/reliability.md) on the debug model, two 1-rank
# replica groups under torchft's Lighthouse (scripts/lighthouse.py):
#  1. what the quorum costs a step when nothing fails: each step's ft_join_s
#     (asking the Lighthouse, the group's broadcast) against the step's time;
#     and the step of two groups against a 2-rank DDP job of the same
#     tokens, which has no quorum;
#  2. a lost replica: group 1 SIGKILLed once it logged step 5 and
#     relaunched at once; seconds until it has committed a step again
#     (process start, healing from group 0, one step) and how many steps
#     group 0 trained meanwhile, against the whole-job path: the DDP job
#     with a checkpoint every step, a rank killed after step 5 and `titan
#     launch --max-restarts 1` resuming it, seconds from step 5 to step 6.
# Prints one table. Usage: benchmarks/fault_tolerance.sh [STEPS] [BUILD_DIR]
# (default 30, build). Not part of the test suite.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
steps=${1:-30}
build=${2:-$root/build}
titan=$build/bin/titan
python=$root/.venv/bin/python
out=${TITAN_BENCH_OUT:-$(mktemp -d -t titan-ft-XXXXXX)}
source "$root/benchmarks/cpu_name.sh"
port=28751
common=(--set training.steps=$steps --set training.seq_len=128 --set training.local_batch_size=4
        --set training.threads=1 --set metrics.log_freq=1)
ft() {  # replica id, dump
  echo --set fault_tolerance.enable=true --set fault_tolerance.replica_id=$1 --set fault_tolerance.group_size=2 \
    --set fault_tolerance.lighthouse=http://127.0.0.1:$port --set fault_tolerance.address=127.0.0.1 \
    --set job.dump_folder=$2
}
# A replica group writes its metrics in <job.dump_folder>/ft-replica-<id>.
lines() { [[ -f $1/metrics.jsonl ]] && wc -l < "$1/metrics.jsonl" || echo 0; }
wait_lines() {  # dump, count
  until (( $(lines "$1") >= $2 )); do sleep 0.02; done
}
now() { date +%s.%N; }
cleanup() { kill $(jobs -p) 2>/dev/null || true; }
trap cleanup EXIT

cd "$root"
"$python" scripts/lighthouse.py --min_replicas 2 --bind 127.0.0.1:$port --heartbeat_timeout_ms 1000 \
  --join_timeout_ms 10000 > "$out/lighthouse.log" 2>&1 &

# 1. Nothing fails.
"$titan" train configs/llama3_debugmodel.yaml "${common[@]}" $(ft 0 "$out/quiet0") > "$out/quiet0.log" 2>&1 &
g0=$!
"$titan" train configs/llama3_debugmodel.yaml "${common[@]}" $(ft 1 "$out/quiet1") > "$out/quiet1.log" 2>&1
wait $g0
"$titan" launch --nproc-per-node 2 --master-port $((port + 2)) -- "$titan" train configs/llama3_debugmodel_ddp.yaml \
  "${common[@]}" --set job.dump_folder="$out/ddp" > "$out/ddp.log" 2>&1
read -r join step ddp_step < <("$python" - "$out" <<'PY'
import json, sys
def rows(path):
    return [json.loads(l) for l in open(path) if l.strip()][3:]  # past the warm-up
ft = rows(sys.argv[1] + "/quiet0/ft-replica-0/metrics.jsonl")
ddp = rows(sys.argv[1] + "/ddp/metrics.jsonl")
mean = lambda xs: sum(xs) / len(xs)
print(mean([r["ft_join_s"] for r in ft]), mean([r["time_metrics/end_to_end(s)"] for r in ft]),
      mean([r["time_metrics/end_to_end(s)"] for r in ddp]))
PY
)

# 2. A group lost and relaunched; the survivor trains on.
"$titan" train configs/llama3_debugmodel.yaml "${common[@]}" $(ft 0 "$out/lost0") > "$out/lost0.log" 2>&1 &
g0=$!
"$titan" train configs/llama3_debugmodel.yaml "${common[@]}" $(ft 1 "$out/lost1") > "$out/lost1.log" 2>&1 &
g1=$!
wait_lines "$out/lost1/ft-replica-1" 5
kill -KILL $g1; wait $g1 2>/dev/null || true
killed=$(now); survivor_before=$(lines "$out/lost0/ft-replica-0")
"$titan" train configs/llama3_debugmodel.yaml "${common[@]}" $(ft 1 "$out/relaunched1") > "$out/relaunched1.log" 2>&1 &
g1=$!
wait_lines "$out/relaunched1/ft-replica-1" 1
heal_s=$("$python" -c "print($(now) - $killed)")
survivor_steps=$(( $(lines "$out/lost0/ft-replica-0") - survivor_before ))
wait $g0 $g1
transfer=$(grep -o 'healed from [^ ]* at step [0-9]* ([0-9]* tensors, [0-9.]* s)' "$out/relaunched1.log" || echo "no heal logged")

# The whole-job path: a checkpoint every step, rank 1 killed after step 5.
TITAN_TEST_SIGNAL=KILL:rank=1:phase=forward:step=6 "$titan" launch --nproc-per-node 2 --master-port $((port + 4)) \
  --max-restarts 1 -- "$titan" train configs/llama3_debugmodel_ddp.yaml "${common[@]}" \
  --set job.dump_folder="$out/restart" --set checkpoint.enable=true --set checkpoint.interval=1 \
  > "$out/restart.log" 2>&1 &
job=$!
wait_lines "$out/restart" 5
step5=$(now)
wait_lines "$out/restart" 6
restart_s=$("$python" -c "print($(now) - $step5)")
wait $job

echo "fault tolerance, debug model (seq 128, batch 4, 1 thread a group), $(cpu_name), $(date -u '+%Y-%m-%d %H:%M UTC')"
printf '%-64s %10s %10s %8s\n' "what is compared" ours reference ratio
"$python" - "$join" "$step" "$ddp_step" "$heal_s" "$restart_s" "$out" "$survivor_before" <<'PY'
import json, statistics, sys
join, step, ddp, heal, restart = map(float, sys.argv[1:6])
rows = [("s/step quorum (ft_join_s) vs the whole step, 2 groups", join, step),
        ("s/step: 2 replica groups vs 2-rank DDP (same tokens)", step, ddp),
        ("s until a lost member steps again: heal vs job restart", heal, restart)]
# The survivor's committed steps from the loss on (the first holds the
# discarded attempt and the wait for a new quorum) against its median before.
times = [json.loads(l)["time_metrics/end_to_end(s)"]
         for l in open(sys.argv[6] + "/lost0/ft-replica-0/metrics.jsonl") if l.strip()]
before = int(sys.argv[7])
normal = statistics.median(times[2:before])
for k, t in enumerate(times[before:before + 4]):
    rows.append((f"survivor s/step, step {k + 1} after the loss vs before it", t, normal))
for name, ours, ref in rows:
    print(f"{name:<64} {ours:>10.4f} {ref:>10.4f} {ours / ref:>8.3f}")
PY
echo "group 0 trained $survivor_steps steps while group 1 was down and healing; $transfer"
echo "logs and metrics: $out"
