#!/usr/bin/env bash
# The one command a lent GPU machine runs: builds Titan against that
# machine's PyTorch (LibTorch 2.11, CUDA 13) in build-cuda/, runs the CUDA
# tests (ctest label `cuda`: the fused kernels against their CPU references,
# float8 _scaled_mm against the exact emulation, NCCL at world size 1, the
# CUDA-graph step), the single-GPU benchmark against PyTorch
# (benchmarks/gpu/run.sh) and the rest of the test suite, and writes
# OUT_DIR/gpu_check.md: one table (check, result, detail), the environment
# (GPU, driver, torch, nvcc, NCCL) and the benchmark table.
#
# Usage: scripts/gpu_check.sh OUT_DIR [STEP...]        (default: all)
#   build   configure build-cuda/ (Release; TORCH_CUDA_ARCH_LIST from the
#           GPU's compute capability, default 9.0; NCCL from the nvidia-nccl
#           wheel; the C++ libraries from .gpu-deps/ where the system lacks
#           them) and build titan, titan_all_plugins and titan_tests
#   test    ctest -L cuda, then the rest of the suite (ctest -LE cuda -j8
#           --timeout 300) in the time left
#   bench   benchmarks/gpu/run.sh (builds titan and the plugins first)
#   all     build, the CUDA tests, bench, then the rest of the suite
#   configure  only configure (benchmarks/gpu/run.sh uses it)
# Every step builds what it needs first (a no-op when up to date), so `test`
# or `bench` alone on a fresh machine also works, at the build's cost.
# Writes to OUT_DIR: gpu_check.md, build.log, tests.txt, bench.log,
# gpu_bench.md (at most 5 files: the device tool returns 8).
#
# Without a GPU (no nvidia-smi, or torch.cuda.is_available() false) it still
# builds, runs the tests (the CUDA ones report "TITAN_SKIPPED: ..." and ctest
# counts them as skipped), skips the benchmark, and the table says
# "skipped: no GPU".
#
# Time: the device tool stops a command after 10 minutes, so the script
# stops its own steps at TITAN_GPU_TIME_LIMIT seconds (default 570; 0 = no
# limit, for a workstation) and still writes gpu_check.md. A step cut short
# says so; run it again in the next call: the machine keeps build-cuda/
# (and the results so far, build-cuda/gpu_check/) only while warm, about
# 30 s after a call, so make the next call at once.
#
# Through the device tool (from the repository root here):
#   scripts/gpu_deps.sh fetch    # once, here on Debian 12: .gpu-deps/debs (12.4 MiB)
#   run(command="bash scripts/gpu_check.sh $OUT/gpu build test", carry=[".gpu-deps"], timeout_s=600)
#   run(command="bash scripts/gpu_check.sh $OUT/gpu bench", carry=[".gpu-deps"], timeout_s=600)
# or, on a machine that may not stay warm, everything in one call:
#   run(command="bash scripts/gpu_check.sh $OUT/gpu all", carry=[".gpu-deps"], timeout_s=600)
#
# Environment: TITAN_CUDA_BUILD (default build-cuda), TITAN_PYTHON (default
# .venv/bin/python if present, else python3), TITAN_GPU_BUILD_TYPE
# (Release), TITAN_GPU_DEPS (auto | system | bundle), TITAN_GPU_DEPS_PREFIX
# (default BUILD/deps), TITAN_GPU_BUILD_JOBS (nproc), TITAN_GPU_TEST_JOBS
# (8), TITAN_GPU_CUDA_TEST_JOBS (2), TITAN_BENCH_STEPS (30),
# TITAN_BENCH_CONFIGS and PYTORCH_MODES (benchmarks/gpu/run.sh),
# TORCH_CUDA_ARCH_LIST (overrides the detected architecture).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

if [ $# -lt 1 ] || [[ $1 == -* ]]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 2
fi
out_dir=$1; shift

# ---- steps, in a fixed order --------------------------------------------
want_configure=0 want_build=0 want_cuda_tests=0 want_bench=0 want_suite=0
(($#)) || set -- all
for step in "$@"; do
  case $step in
    configure) want_configure=1 ;;
    build) want_build=1 ;;
    test) want_cuda_tests=1; want_suite=1 ;;
    bench) want_bench=1 ;;
    all) want_build=1; want_cuda_tests=1; want_bench=1; want_suite=1 ;;
    *) echo "gpu_check: unknown step '$step' (build, test, bench, all, configure)" >&2; exit 2 ;;
  esac
done

mkdir -p "$out_dir"
out_dir=$(cd "$out_dir" && pwd)
build=${TITAN_CUDA_BUILD:-$root/build-cuda}
mkdir -p "$build"
build=$(cd "$build" && pwd)
state=$build/gpu_check  # results of earlier calls while the machine stays warm
mkdir -p "$state"
results=$state/results.tsv
touch "$results"
build_type=${TITAN_GPU_BUILD_TYPE:-Release}
nproc=$(nproc)
build_jobs=${TITAN_GPU_BUILD_JOBS:-$nproc}
test_jobs=${TITAN_GPU_TEST_JOBS:-$((nproc < 8 ? nproc : 8))}
cuda_test_jobs=${TITAN_GPU_CUDA_TEST_JOBS:-2}
time_limit=${TITAN_GPU_TIME_LIMIT:-570}
reserve=25  # seconds kept for writing the report
start=$SECONDS
failed=0

python=${TITAN_PYTHON:-}
if [ -z "$python" ]; then
  python=python3
  [ -x "$root/.venv/bin/python" ] && python=$root/.venv/bin/python
fi
export TITAN_PYTHON=$python

log() { echo "gpu_check: $*"; }
seconds_left() {  # before the report must be written
  if [ "$time_limit" -eq 0 ]; then echo 999999; else echo $((time_limit - reserve - (SECONDS - start))); fi
}
capped() {  # SECONDS CMD...: run CMD, stopped after SECONDS (rc 124 then)
  local cap=$1; shift
  if [ "$time_limit" -eq 0 ]; then "$@"; else timeout --kill-after=20 "$cap" "$@"; fi
}
# record CHECK RESULT DETAIL: one row of the table, replacing a row of the
# same check (write_report orders the rows).
record() {
  local tmp detail
  detail=$(printf '%s' "$3" | tr '\t\n' '  ')
  tmp=$(mktemp)
  CHECK=$1 awk -F'\t' '$1 != ENVIRON["CHECK"]' "$results" >"$tmp"
  printf '%s\t%s\t%s\n' "$1" "$2" "$detail" >>"$tmp"
  mv "$tmp" "$results"
}
forget() {  # forget PREFIX: drop the rows whose check starts with PREFIX
  local tmp
  tmp=$(mktemp)
  PREFIX=$1 awk -F'\t' 'index($1, ENVIRON["PREFIX"]) != 1' "$results" >"$tmp"
  mv "$tmp" "$results"
}
tail_to_out() { [ -f "$1" ] && tail -c 8000000 "$1" >"$out_dir/$2" || true; }  # under the 16 MiB a file

# ---- the machine ----------------------------------------------------------
gpu=0 no_gpu_reason=""
if ! command -v nvidia-smi >/dev/null; then
  no_gpu_reason="nvidia-smi not found"
elif ! nvidia-smi -L >/dev/null 2>&1; then
  no_gpu_reason="nvidia-smi finds no GPU"
elif ! "$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  no_gpu_reason="$python: torch.cuda.is_available() is False"
else
  gpu=1
fi
if ((gpu)); then log "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"; else log "no GPU: $no_gpu_reason"; fi

compute_cap=""
if ((gpu)); then
  compute_cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' ') || true
  [[ $compute_cap =~ ^[0-9]+\.[0-9]+$ ]] ||
    compute_cap=$("$python" -c 'import torch; print("%d.%d" % torch.cuda.get_device_capability())' 2>/dev/null) || true
fi
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-${compute_cap:-9.0}}

# cmake and ninja may live beside the Python (pip's cmake and ninja wheels).
for tool in cmake ninja; do
  if ! command -v "$tool" >/dev/null; then
    PATH=$(dirname "$("$python" -c 'import sys; print(sys.executable)')"):$PATH
  fi
  command -v "$tool" >/dev/null || { echo "gpu_check: $tool not found" >&2; exit 1; }
done

nvcc=$(command -v nvcc || true)
if [ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ]; then nvcc=/usr/local/cuda/bin/nvcc; fi
if [ -n "$nvcc" ] && ! command -v nvcc >/dev/null; then export CUDACXX=$nvcc; fi

# The nvidia-nccl wheel beside torch (LibTorch ships no nccl.h); without it
# CMake looks in the CUDA toolkit (TitanDependencies.cmake).
nccl_dir=$("$python" - <<'PY' 2>/dev/null || true
import glob
import os
import torch
candidates = []
try:
    import nvidia.nccl as nccl
    candidates += list(getattr(nccl, "__path__", []))
    if getattr(nccl, "__file__", None):
        candidates.append(os.path.dirname(nccl.__file__))
except ImportError:
    pass
site = os.path.dirname(os.path.dirname(torch.__file__))
candidates += [os.path.join(site, "nvidia", "nccl"), os.path.join(site, "nvidia", "cu13")]
candidates += sorted(os.path.dirname(os.path.dirname(h))
                     for h in glob.glob(os.path.join(site, "nvidia", "**", "include", "nccl.h"), recursive=True))
for c in candidates:
    if os.path.isfile(os.path.join(c, "include", "nccl.h")) and glob.glob(os.path.join(c, "lib", "libnccl.so*")):
        print(c)
        break
PY
)
nccl_library=""
if [ -n "$nccl_dir" ]; then
  nccl_library=$nccl_dir/lib/libnccl.so.2
  [ -e "$nccl_library" ] || nccl_library=$(find "$nccl_dir/lib" -name 'libnccl.so*' | sort | head -1)
fi

# ---- the C++ libraries: the system's, or the carried .debs ----------------
system_has_deps() {
  local header dir found
  for header in yaml-cpp/yaml.h spdlog/spdlog.h fmt/format.h nlohmann/json.hpp doctest/doctest.h \
                boost/dll/shared_library.hpp pcre2.h zlib.h gloo/algorithm.h; do
    found=0
    for dir in /usr/include /usr/local/include; do [ -e "$dir/$header" ] && found=1; done
    ((found)) || { echo "$header"; return 1; }
  done
  command -v pkg-config >/dev/null || { echo "pkg-config"; return 1; }
}
deps_mode=${TITAN_GPU_DEPS:-auto}
deps_prefix=${TITAN_GPU_DEPS_PREFIX:-$build/deps}
if [ "$deps_mode" = auto ]; then
  if missing=$(system_has_deps); then deps_mode=system; else deps_mode=bundle; log "the system lacks $missing: using .gpu-deps"; fi
fi

configure() {
  local args=(-S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE="$build_type"
              -DCMAKE_POLICY_VERSION_MINIMUM=3.5)  # CMake 4 and older package configs
  local torch_prefix
  torch_prefix=$("$python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)') ||
    { record build FAIL "$python cannot import torch"; return 1; }
  args+=(-DCMAKE_PREFIX_PATH="$torch_prefix")
  if [ -n "$nccl_dir" ]; then
    args+=(-DNCCL_INCLUDE_DIR="$nccl_dir/include" -DNCCL_LIBRARY="$nccl_library")
  fi
  local runtime_path=""
  if [ "$deps_mode" = bundle ]; then
    bash "$root/scripts/gpu_deps.sh" unpack "$deps_prefix" >>"$state/build.log" 2>&1 ||
      { record build FAIL "unpacking .gpu-deps failed (run scripts/gpu_deps.sh fetch on the Debian machine and carry .gpu-deps); see build.log"; return 1; }
    local arg
    while IFS= read -r arg; do args+=("$arg"); done < <(bash "$root/scripts/gpu_deps.sh" cmake-args "$deps_prefix")
    runtime_path=$deps_prefix/runtime-lib
  fi
  # What the builds, tests and benchmark runs of this folder need, also for
  # benchmarks/gpu/run.sh and anyone running build-cuda/bin/titan by hand.
  {
    echo "# Written by scripts/gpu_check.sh: source it before using $build."
    echo "export TORCH_CUDA_ARCH_LIST='$TORCH_CUDA_ARCH_LIST'"
    [ -z "${CUDACXX:-}" ] || echo "export CUDACXX='$CUDACXX'"
    [ -z "$runtime_path" ] || echo "case \":\${LD_LIBRARY_PATH:-}:\" in *:'$runtime_path':*) ;;" \
      "*) export LD_LIBRARY_PATH='$runtime_path'\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH} ;; esac"
  } >"$state/env.sh"
  # shellcheck source=/dev/null
  source "$state/env.sh"
  log "configure: $build ($build_type, TORCH_CUDA_ARCH_LIST=$TORCH_CUDA_ARCH_LIST, C++ deps: $deps_mode)"
  echo "+ cmake ${args[*]}" >>"$state/build.log"
  cmake "${args[@]}" >>"$state/build.log" 2>&1 ||
    { record build FAIL "cmake configure failed: $(grep -m1 -E 'CMake Error|error' "$state/build.log" | cut -c1-200); see build.log"; return 1; }
}

build_targets() {  # TARGET...: configure, then build them under the time cap
  local cap rc=0 t0=$SECONDS
  : >"$state/build.log"
  rm -f "$state/build_ok"
  configure || { failed=1; return 1; }
  cap=$(seconds_left)
  if [ "$cap" -lt 30 ]; then record build "not run" "time limit reached before the build"; return 1; fi
  log "build: $* (-j $build_jobs, at most $cap s)"
  echo "+ cmake --build $build -j $build_jobs --target $*" >>"$state/build.log"
  capped "$cap" cmake --build "$build" -j "$build_jobs" --target "$@" >>"$state/build.log" 2>&1 || rc=$?
  local took=$((SECONDS - t0)) progress
  progress=$(grep -oE '^\[[0-9]+/[0-9]+\]' "$state/build.log" | tail -1 | tr -d '[]' || true)
  grep -q 'ninja: no work to do' "$state/build.log" && progress="up to date"
  local what="$build_type, $*; ${progress:-0} steps in ${took} s with -j $build_jobs; TORCH_CUDA_ARCH_LIST=$TORCH_CUDA_ARCH_LIST; C++ deps: $deps_mode"
  if [ "$rc" -eq 0 ]; then
    record build pass "$what"
    echo "$*" >"$state/build_ok"
  elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    record build incomplete "stopped at the time limit: $what; run the step again while the machine is warm"
    failed=1
  else
    local first_error
    first_error=$(grep -m1 -E 'error:|Error' "$state/build.log" || grep -m1 FAILED "$state/build.log" || true)
    record build FAIL "${first_error:0:240}; $what; see build.log"
    failed=1
  fi
  log "build: exit $rc after ${took} s (build.log)"
  [ "$rc" -eq 0 ]
}

# ---- tests ----------------------------------------------------------------
# parse_ctest LOG: one line per test run, "name<TAB>status<TAB>seconds<TAB>note",
# status pass, fail, skipped or not run; the note is the TITAN_SKIPPED
# reason or the first error line (from ctest -V's "N: ..." output lines).
parse_ctest() {
  "$python" - "$1" <<'PY'
import re, sys
lines = open(sys.argv[1], errors="replace").read().splitlines()
result = re.compile(r"^\s*\d+/\d+\s+Test\s+#(\d+): (.*)$")
notes = {}
for line in lines:
    m = re.match(r"^(\d+): (.*)$", line)
    if not m:
        continue
    number, text = m.groups()
    if "TITAN_SKIPPED:" in text:
        notes[number] = text.split("TITAN_SKIPPED:", 1)[1].strip()
    elif number not in notes and re.search(r"\b(ERROR|FATAL ERROR|error|what\(\))\b", text):
        notes[number] = text.strip()
for line in lines:
    m = result.match(line)
    if not m:
        continue
    number, rest = m.groups()
    dots = list(re.finditer(r" \.+(?=\s|\*)", rest))  # the filler between name and status
    if dots:
        name, status = rest[:dots[-1].start()], rest[dots[-1].end():]
    else:
        name, status = rest, ""
    status = status.strip().lstrip("*")
    t = re.search(r"\s([\d.]+) sec$", status)
    seconds = t.group(1) if t else ""
    word = status.split()[0] if status else "?"
    kind = {"Passed": "pass", "Skipped": "skipped", "Not": "not run", "Disabled": "not run"}.get(word, "fail")
    note = notes.get(number, "")
    if kind == "fail" and not note:
        note = status[:t.start()].strip() if t else status
    # No empty field: bash's read would merge two tabs into one.
    print("\t".join([name.strip() or "?", kind, seconds or "?", note.replace("\t", " ")[:240] or "-"]))
PY
}

count_tests() {  # LABEL-ARGS...: how many tests ctest would run
  local n
  n=$(cd "$build" && ctest -N "$@" 2>/dev/null | sed -n 's/^Total Tests: //p') || true
  echo "${n:-0}"
}

run_cuda_tests() {
  forget "cuda: "
  forget "cuda tests"
  local check="cuda tests (ctest -L cuda)"
  if [ ! -f "$state/build_ok" ] || ! grep -qw titan_tests "$state/build_ok"; then
    record "$check" "not run" "titan_tests is not built"; return
  fi
  local total cap rc=0
  total=$(count_tests -L '^cuda$')
  if [ "$total" -eq 0 ]; then record "$check" FAIL "no test carries the label cuda"; failed=1; return; fi
  cap=$(seconds_left)
  if [ "$cap" -lt 30 ]; then record "$check" "not run" "time limit reached; run \`test\` in the next call"; return; fi
  log "cuda tests: $total (ctest -L cuda -j $cuda_test_jobs, at most $cap s)"
  (cd "$build" && capped "$cap" ctest -L '^cuda$' -V -j "$cuda_test_jobs" --timeout 300) >"$state/cuda_tests.log" 2>&1 || rc=$?
  local name kind seconds note passed=0 fails=0 skipped=0 ran=0
  while IFS=$'\t' read -r name kind seconds note; do
    ran=$((ran + 1))
    case $kind in
      pass) passed=$((passed + 1)); record "cuda: $name" pass "$seconds s" ;;
      skipped) skipped=$((skipped + 1))
               if ((gpu)); then record "cuda: $name" skipped "$note"; else record "cuda: $name" "skipped: no GPU" "$note"; fi ;;
      not\ run) record "cuda: $name" "not run" "$note" ;;
      *) fails=$((fails + 1)); record "cuda: $name" FAIL "$note (${seconds} s)" ;;
    esac
  done < <(parse_ctest "$state/cuda_tests.log")
  local summary="$passed passed, $fails failed, $skipped skipped of $total"
  [ "$ran" -eq "$total" ] || summary+="; $((total - ran)) not run (time limit)"
  if [ "$fails" -gt 0 ] || [ "$ran" -lt "$total" ]; then
    record "$check" FAIL "$summary"; failed=1
  elif [ "$skipped" -gt 0 ] && ! ((gpu)); then
    record "$check" "skipped: no GPU" "$summary ($no_gpu_reason)"
  else
    record "$check" pass "$summary"
  fi
  log "cuda tests: $summary"
}

run_suite() {
  local check="rest of the suite (ctest -LE cuda)"
  if [ ! -f "$state/build_ok" ] || ! grep -qw titan_tests "$state/build_ok"; then
    record "$check" "not run" "titan_tests is not built"; return
  fi
  local total cap rc=0
  total=$(count_tests -LE '^cuda$')
  cap=$(seconds_left)
  if [ "$cap" -lt 60 ]; then
    record "$check" "not run" "time limit: $cap s left; run \`test\` in a call of its own"; return
  fi
  log "rest of the suite: $total tests (ctest -LE cuda -j $test_jobs --timeout 300, at most $cap s)"
  (cd "$build" && capped "$cap" ctest -LE '^cuda$' -j "$test_jobs" --timeout 300 --output-on-failure) \
    >"$state/suite.log" 2>&1 || rc=$?
  local name kind seconds note passed=0 fails=0 skipped=0 ran=0 failures=()
  while IFS=$'\t' read -r name kind seconds note; do
    ran=$((ran + 1))
    case $kind in
      pass) passed=$((passed + 1)) ;;
      skipped | not\ run) skipped=$((skipped + 1)) ;;
      *) fails=$((fails + 1)); failures+=("$name") ;;
    esac
  done < <(parse_ctest "$state/suite.log")
  local summary="$passed passed, $fails failed, $skipped skipped or not run of $total"
  if [ "$ran" -lt "$total" ]; then summary+="; $((total - ran)) not reached in $cap s"; fi
  if ((fails)); then
    local list
    list=$(printf '%s; ' "${failures[@]:0:10}")
    summary+=". Failed: ${list%; }"
    ((fails <= 10)) || summary+=" and $((fails - 10)) more"
  fi
  if ((fails)); then record "$check" FAIL "$summary (tests.txt)"; failed=1
  elif [ "$ran" -lt "$total" ]; then record "$check" incomplete "$summary"
  else record "$check" pass "$summary"; fi
  log "rest of the suite: $summary"
}

write_tests_txt() {
  {
    for part in cuda_tests suite; do
      [ -f "$state/$part.log" ] || continue
      echo "===== $part ($(date -r "$state/$part.log" '+%F %T'))"
      echo "--- per test: name, status, seconds, note"
      parse_ctest "$state/$part.log" | tr '\t' '|'
      echo "--- ctest output"
      tail -c 3000000 "$state/$part.log"
      echo
    done
  } >"$out_dir/tests.txt"
}

# ---- benchmark ------------------------------------------------------------
run_bench() {
  local check="bench (benchmarks/gpu/run.sh)"
  if ! ((gpu)); then
    record "$check" "skipped: no GPU" "$no_gpu_reason"
    log "bench: skipped: no GPU ($no_gpu_reason)"
    return
  fi
  if [ ! -f "$state/build_ok" ]; then record "$check" "not run" "titan is not built"; return; fi
  local cap rc=0
  cap=$(seconds_left)
  if [ "$cap" -lt 60 ]; then record "$check" "not run" "time limit: $cap s left; run \`bench\` in a call of its own"; return; fi
  log "bench: benchmarks/gpu/run.sh ${TITAN_BENCH_STEPS:-30} (at most $cap s)"
  rm -f "$state/gpu_bench.md"
  TITAN_CUDA_BUILD=$build TITAN_BENCH_TABLE=$state/gpu_bench.md \
    capped "$cap" bash "$root/benchmarks/gpu/run.sh" "${TITAN_BENCH_STEPS:-30}" >"$state/bench.log" 2>&1 || rc=$?
  local shapes
  shapes=$(grep -c '^== ' "$state/bench.log" || true)
  if [ "$rc" -eq 0 ]; then
    record "$check" pass "$shapes shapes; table below"
  elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    record "$check" incomplete "stopped at the time limit during shape $shapes; the table holds what finished; run \`bench\` again with TITAN_BENCH_CONFIGS set to the rest"
  else
    record "$check" FAIL "exit $rc: $(grep -m1 -E 'failed|Error|error' "$state/bench.log" | cut -c1-200); see bench.log"
    failed=1
  fi
  log "bench: exit $rc (bench.log)"
}

# ---- the report -----------------------------------------------------------
environment_rows() {  # "what<TAB>value" lines
  local gpu_line="none ($no_gpu_reason)"
  if ((gpu)); then
    gpu_line=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1)
    gpu_line="$gpu_line (driver); compute capability ${compute_cap:-?}"
  fi
  printf 'GPU\t%s\n' "$gpu_line"
  printf 'PyTorch\t%s\n' "$("$python" -c '
import torch
def ask(f):
    try:
        return f()
    except Exception as e:
        return f"? ({type(e).__name__})"
nccl = ask(lambda: ".".join(map(str, torch.cuda.nccl.version())))
cudnn = ask(torch.backends.cudnn.version)
where = torch.__file__.rsplit("/", 2)[0]
print(f"{torch.__version__} (CUDA {torch.version.cuda}, cuDNN {cudnn}, NCCL {nccl}) at {where}")
' 2>&1 | tail -1)"
  printf 'nvcc\t%s\n' "$([ -n "$nvcc" ] && "$nvcc" --version | grep -m1 release | sed 's/.*release //' || echo "not found")"
  local nccl_header=${nccl_dir:+$nccl_dir/include/nccl.h}
  if [ -z "$nccl_header" ] && [ -f "$build/CMakeCache.txt" ]; then
    nccl_header=$(sed -n 's/^NCCL_INCLUDE_DIR:[A-Z]*=//p' "$build/CMakeCache.txt")/nccl.h
  fi
  if [ -f "$nccl_header" ]; then
    printf 'NCCL (built against)\t%s\n' "$(awk '/#define NCCL_(MAJOR|MINOR|PATCH) /{v = v (v ? "." : "") $3} END {print v}' "$nccl_header") ($nccl_header)"
  else
    printf 'NCCL (built against)\tunknown (no nccl.h found)\n'
  fi
  printf 'TORCH_CUDA_ARCH_LIST\t%s\n' "$TORCH_CUDA_ARCH_LIST"
  printf 'cmake, ninja, g++\t%s, %s, %s\n' "$(cmake --version | head -1 | sed 's/cmake version //')" \
    "$(ninja --version 2>/dev/null || echo '?')" "$(g++ -dumpfullversion 2>/dev/null || echo '?')"
  printf 'C++ libraries\t%s\n' "$([ "$deps_mode" = bundle ] && echo "carried Debian 12 .debs (.gpu-deps), unpacked in $deps_prefix" || echo "the system's")"
  printf 'machine\t%s, %s cores\n' "$(. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-?}" || uname -sr)" "$nproc"
  local commit="unknown (no git checkout)"
  if commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null); then
    if git -C "$root" status --porcelain 2>/dev/null | grep -q .; then commit+=" with uncommitted changes"; fi
  fi
  printf 'source\t%s\n' "$commit"
}

write_report() {
  local env_file=$state/environment.tsv
  environment_rows >"$env_file" 2>/dev/null || true
  "$python" - "$results" "$env_file" "$state/gpu_bench.md" "$out_dir/gpu_check.md" "$*" <<'PY'
import os, sys, time
results, env, bench, out, steps = sys.argv[1:6]
def esc(s):
    return s.replace("|", "\\|")
def rows(path):
    if not os.path.exists(path):
        return []
    return [line.rstrip("\n").split("\t") for line in open(path) if line.strip()]
order = ["build", "cuda tests", "cuda: ", "bench", "rest of the suite"]
def rank(row):
    return next((i for i, p in enumerate(order) if row[0].startswith(p)), len(order))
lines = ["# Titan GPU check", "",
         f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}; steps asked for in this call: {steps}. "
         "Rows from earlier calls on the same (warm) machine are kept.", "",
         "| check | result | detail |", "|---|---|---|"]
for r in sorted(rows(results), key=rank):  # stable: cuda tests in the order they finished
    r += [""] * (3 - len(r))
    lines.append(f"| {esc(r[0])} | {esc(r[1])} | {esc(r[2])} |")
lines += ["", "## Environment", "", "| | |", "|---|---|"]
for r in rows(env):
    lines.append(f"| {esc(r[0])} | {esc(r[1] if len(r) > 1 else '')} |")
lines += ["", "## Single GPU vs PyTorch (benchmarks/gpu/run.sh)", ""]
if os.path.exists(bench):
    lines.append(open(bench).read().rstrip())
else:
    lines.append("Not run on this machine yet (`scripts/gpu_check.sh OUT bench`).")
open(out, "w").write("\n".join(lines) + "\n")
PY
}

finish() {
  tail_to_out "$state/build.log" build.log
  if [ -f "$state/cuda_tests.log" ] || [ -f "$state/suite.log" ]; then write_tests_txt; fi
  tail_to_out "$state/bench.log" bench.log
  if [ -f "$state/gpu_bench.md" ]; then cp "$state/gpu_bench.md" "$out_dir/gpu_bench.md"; fi
  write_report "$@"
  cat "$out_dir/gpu_check.md"
  log "wrote $out_dir/gpu_check.md in $((SECONDS - start)) s"
}

# ---- run --------------------------------------------------------------------
if ((want_configure)) && ! ((want_build || want_cuda_tests || want_bench || want_suite)); then
  : >"$state/build.log"
  configure || { tail -30 "$state/build.log"; exit 1; }
  exit 0
fi
targets=(titan titan_all_plugins)
if ((want_build || want_cuda_tests || want_suite)); then targets+=(titan_tests); fi
# The fused kernels' direct tests link LibTorch's CUDA libraries: a program
# of their own (tests/CMakeLists.txt), labelled cuda like the rest.
if ((want_build || want_cuda_tests)); then targets+=(titan_cuda_tests); fi
if build_targets "${targets[@]}"; then
  if ((want_cuda_tests)); then run_cuda_tests; fi
  if ((want_bench)); then run_bench; fi
  if ((want_suite)); then run_suite; fi
else
  tail -30 "$state/build.log"
  if ((want_cuda_tests)); then record "cuda tests (ctest -L cuda)" "not run" "the build did not finish"; fi
  if ((want_bench)); then record "bench (benchmarks/gpu/run.sh)" "not run" "the build did not finish"; fi
  if ((want_suite)); then record "rest of the suite (ctest -LE cuda)" "not run" "the build did not finish"; fi
fi
finish "$@"
exit "$failed"
