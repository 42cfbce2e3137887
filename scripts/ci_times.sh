#!/usr/bin/env bash
# Where CI's time goes, from the last run in a build folder: the phases
# scripts/test.sh timed, the slowest build steps (ninja's log) and build time
# per target, the slowest tests and test time per label (ctest's JUnit file).
# Usage: scripts/ci_times.sh [BUILD_DIR] [--top N]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build
top=15
while (($#)); do
  case "$1" in
    --top) top=$2; shift 2 ;;
    -h|--help) sed -n '2,5p' "$0"; exit 0 ;;
    *) build=$1; shift ;;
  esac
done
[ -f "$build/.ninja_log" ] || { echo "ci_times: no $build/.ninja_log: build first (scripts/build.sh)" >&2; exit 2; }

TOP=$top BUILD=$build python3 - <<'EOF'
import json, os, re, subprocess, xml.etree.ElementTree as ET
from collections import defaultdict

build, top = os.environ["BUILD"], int(os.environ["TOP"])

def table(title, rows, headers):
    print(f"\n{title}")
    widths = [max(len(str(r[i])) for r in rows + [headers]) for i in range(len(headers))]
    print("  " + "  ".join(h.ljust(w) for h, w in zip(headers, widths)))
    for r in rows:
        print("  " + "  ".join(str(c).rjust(w) if isinstance(c, (int, float)) or c.endswith(" s") else str(c).ljust(w)
                               for c, w in zip(r, widths)))

phases = os.path.join(build, "ci_phases.txt")
if os.path.exists(phases):
    rows = [line.split() for line in open(phases) if line.strip()]
    table("Phases of the last scripts/test.sh run", [(n, f"{float(s):.0f} s") for n, s in rows], ["phase", "wall"])

# ninja log v5: start_ms end_ms mtime output hash; a later line for the same
# output replaces an earlier one, so this is the newest build of each output.
steps = {}
for line in open(os.path.join(build, ".ninja_log")):
    if line.startswith("#"):
        continue
    start, end, _, output, _ = line.rstrip("\n").split("\t")
    steps[output] = (int(end) - int(start)) / 1000.0

def target_of(output):
    m = re.search(r"CMakeFiles/([^/]+)\.dir/", output)
    return m.group(1) if m else "(links and generated files)"

slow = sorted(steps.items(), key=lambda kv: -kv[1])[:top]
table(f"Slowest build steps ({len(steps)} steps, {sum(steps.values()):.0f} s of compiler time in all)",
      [(f"{s:.1f} s", out) for out, s in slow], ["time", "output"])
per_target = defaultdict(lambda: [0.0, 0])
for out, s in steps.items():
    per_target[target_of(out)][0] += s
    per_target[target_of(out)][1] += 1
rows = sorted(per_target.items(), key=lambda kv: -kv[1][0])[:top]
table("Build time per target (compiler time; wall is about half on 2 cores)",
      [(f"{t:.0f} s", n, name) for name, (t, n) in rows], ["time", "steps", "target"])

junit = os.path.join(build, "ctest-junit.xml")
if not os.path.exists(junit):
    print(f"\n(no {junit}: run the tests with scripts/test.sh for test times)")
    raise SystemExit(0)
times, failed = {}, set()
for case in ET.parse(junit).getroot().iter("testcase"):
    times[case.get("name")] = float(case.get("time") or 0)
    if case.find("failure") is not None or case.find("error") is not None:
        failed.add(case.get("name"))
# Read here, not passed in the environment: the listing is already ~125 KB,
# near the kernel's 128 KB limit on one environment string.
listing = subprocess.run(["ctest", "--show-only=json-v1"], cwd=build, capture_output=True, text=True)
labels = {}
if listing.returncode == 0:
    for test in json.loads(listing.stdout).get("tests", []):
        for prop in test.get("properties", []):
            if prop["name"] == "LABELS":
                labels[test["name"]] = prop["value"]
slow = sorted(times.items(), key=lambda kv: -kv[1])[:top]
table(f"Slowest tests ({len(times)} tests, {sum(times.values()):.0f} s of test time in all)",
      [(f"{t:.1f} s", name) for name, t in slow], ["time", "test"])
per_label = defaultdict(lambda: [0.0, 0])
for name, t in times.items():
    for label in labels.get(name, ["(no label)"]):
        per_label[label][0] += t
        per_label[label][1] += 1
rows = sorted(per_label.items(), key=lambda kv: -kv[1][0])
table("Test time per label (summed over tests; ctest -j2 runs two at a time)",
      [(f"{t:.0f} s", n, label) for label, (t, n) in rows], ["time", "tests", "label"])
print(f"\nctest: {len(times) - len(failed)} passed, {len(failed)} failed")
EOF
