#!/usr/bin/env bash
# Installs what Titan needs, builds it, and trains the Llama 3 debug model on
# the built-in corpus (CPU). Extra arguments go to `titan train`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/setup.sh" --training-only
# Only what a training run needs: the CLI, core and the plugins.
TITAN_BUILD_TARGETS="titan titan_all_plugins" bash "$root/scripts/build.sh" "$root/build"
cd "$root"
exec "$root/build/bin/titan" train configs/llama3_debugmodel.yaml "$@"
