#!/usr/bin/env bash
# Installs every Debian package Titan needs to build, test and train (idempotent).
set -euo pipefail
packages=(
  build-essential cmake ninja-build ccache git
  libtorch-dev python3-torch libgloo-dev libopenblas0-pthread
  libyaml-cpp-dev libspdlog-dev libfmt-dev nlohmann-json3-dev doctest-dev
  libboost-dev libboost-filesystem-dev libpcre2-dev zlib1g-dev libsentencepiece-dev
  clang libclang-rt-14-dev  # the fuzz targets (tests/fuzz): clang 14 with libFuzzer and the sanitizer runtimes
)
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
