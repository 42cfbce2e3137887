#!/usr/bin/env bash
# Installs everything Titan needs to build, test and train (idempotent):
# Debian packages, then LibTorch 2.11 (the torch wheel's, CUDA 13 build) in
# the project-local Python environment .venv/ (git-ignored). The build finds
# it through `.venv/bin/python -c 'import torch.utils; ...cmake_prefix_path'`
# (scripts/build.sh). Choices and measured costs: docs/testing.md "Setup".
# `--training-only` (scripts/quickstart.sh) leaves out what only the tests
# use: the fuzz targets' runtimes, Chromium, and the Python readers.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tests=1
case ${1:-} in
  --training-only) tests=0 ;;
  "") ;;
  *) echo "usage: scripts/setup.sh [--training-only]" >&2; exit 2 ;;
esac
packages=(
  build-essential cmake ninja-build ccache git python3 python3-venv
  libgloo-dev libopenblas0-pthread  # Gloo's headers (LibTorch's c10d headers include them; the wheel has none)
  libyaml-cpp-dev libspdlog-dev libfmt-dev nlohmann-json3-dev doctest-dev
  libboost-dev libboost-filesystem-dev libpcre2-dev zlib1g-dev libzstd-dev libsentencepiece-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler-grpc  # fault tolerance's client of torchft's Lighthouse
  clang-19  # the compiler scripts/build.sh prefers: Titan in about 70% of GCC's compile time (docs/testing.md)
  lld-19  # its linker: a LibTorch plugin linked in 0.2 s instead of GNU ld's 1 s
)
if ((tests)); then
  packages+=(
    libclang-rt-19-dev  # the fuzz targets (tests/fuzz): clang 19's libFuzzer and sanitizer runtimes
    chromium fonts-dejavu-core  # headless Chromium opens `titan report`'s page in its test (docs/testing.md "Setup")
  )
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "titan setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# LibTorch: the torch 2.11.0 wheel (built for CUDA 13.0, as the GPU machines
# run). Its CUDA runtime wheels (about 3 GB) duplicate the CUDA 13 toolkit in
# /usr/local/cuda, whose libraries the loader finds: only the three that the
# toolkit lacks (cuSPARSELt, NVSHMEM, cuFile; 230 MB) are installed here.
torch_version=2.11.0
venv=$root/.venv
if ! "$venv/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$torch_version')" \
     >/dev/null 2>&1; then
  echo "titan setup: installing torch==$torch_version (LibTorch) into $venv"
  python3 -m venv "$venv"
  pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
  if [ -d /usr/local/cuda/lib64 ] || ldconfig -p | grep -q libcudart.so.13; then
    # torch's own Python dependencies first (the Python test references
    # import torch), then torch without the CUDA wheels it names.
    "${pip[@]}" filelock "typing-extensions>=4.10.0" "setuptools<82" "sympy>=1.13.3" "networkx>=2.5.1" jinja2 \
      "fsspec>=0.8.5" numpy
    "${pip[@]}" --no-deps "torch==$torch_version" nvidia-cusparselt-cu13==0.8.0 nvidia-nvshmem-cu13==3.4.5 \
      "nvidia-cufile==1.15.1.6.*"
  else
    # No CUDA toolkit here: the wheel's own CUDA runtime packages.
    "${pip[@]}" "torch==$torch_version" numpy
  fi
fi
"$venv/bin/python" -c "import torch; print('titan setup: LibTorch', torch.__version__, 'CUDA', torch.version.cuda)"

# Parquet datasets: Apache Arrow's C++ library, as PyPI's pyarrow wheel
# carries it (libarrow, libparquet and their headers; a 55 MB wheel, no
# dependencies). The build links it when it is there (core/CMakeLists.txt).
pyarrow_version=26.0.1
if ! "$venv/bin/python" -c "import pyarrow, sys; sys.exit(pyarrow.__version__ != '$pyarrow_version')" \
     >/dev/null 2>&1; then
  echo "titan setup: installing pyarrow==$pyarrow_version (Arrow C++ for Parquet datasets) into $venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps "pyarrow==$pyarrow_version"
fi

# torchft's Lighthouse (fault_tolerance): the real coordinator of replica
# groups, run by scripts/lighthouse.py from torchft's Rust extension alone
# (a 2.5 MB wheel; its Python side and dependencies are not needed).
torchft_version=0.2.0
if ! "$venv/bin/python" -c "from importlib.metadata import version; import sys; sys.exit(version('torchft') != '$torchft_version')" \
     >/dev/null 2>&1; then
  echo "titan setup: installing torchft==$torchft_version (the Lighthouse) into $venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps "torchft==$torchft_version"
fi

# The real readers of the files Titan writes, for the tests that run them
# (tests/integration/real_readers_test.cpp): TensorBoard's event reader,
# transformers' LlamaForCausalLM, tokenizers, safetensors. Pinned, with
# their ordinary dependencies and no extras: 57 MB of wheels, about 15 s,
# 280 MB more in .venv (docs/testing.md "Setup").
((tests)) || exit 0
readers=(transformers==5.24.0 tokenizers==0.23.3 safetensors==0.8.0 tensorboard==2.21.0)
if ! "$venv/bin/python" - "${readers[@]}" >/dev/null 2>&1 <<'EOF'
import sys
from importlib.metadata import version
sys.exit(any(version(name) != pinned for name, pinned in (r.split("==") for r in sys.argv[1:])))
EOF
then
  echo "titan setup: installing ${readers[*]} into $venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "${readers[@]}"
fi
