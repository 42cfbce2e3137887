#!/usr/bin/env bash
# The C++ libraries Titan builds against, carried to a lent GPU machine as
# Debian 12 .deb files: that machine has PyTorch, nvcc, cmake and ninja but
# most likely no yaml-cpp, spdlog, fmt, nlohmann-json, doctest, Boost
# headers, PCRE2 headers, Gloo headers or pkg-config, and no internet or
# package manager to fetch them with. scripts/gpu_check.sh calls `unpack`
# and `cmake-args` when the system lacks any of them.
#
#   scripts/gpu_deps.sh fetch                 (here, on Debian 12: apt works)
#       apt-get download the .debs into .gpu-deps/debs/ (git-ignored; 16
#       files, 12.4 MiB, checked against the device tool's 64 MiB carry limit)
#   scripts/gpu_deps.sh unpack PREFIX         (there)
#       unpack every .deb into PREFIX (dpkg-deb, or ar + tar, or python3:
#       no dpkg needed) and make the tree usable from PREFIX: CMake configs
#       and .pc files that name /usr, absolute symbolic links, a pkg-config
#       wrapper, and PREFIX/runtime-lib (the bundled shared libraries the
#       system lacks, for LD_LIBRARY_PATH). Idempotent: a stamp names the
#       .debs unpacked, so a second call with the same .debs does nothing.
#   scripts/gpu_deps.sh cmake-args PREFIX     (there)
#       print, one per line, the -D arguments that point CMake at PREFIX
#   scripts/gpu_deps.sh size
#       the size of .gpu-deps/debs/
#
# Not bundled: libsentencepiece (no Titan source uses it) and ccache
# (optional). zlib1g and libpcre2-8-0 are bundled so that the -dev packages'
# libz.so and libpcre2-8.so resolve inside PREFIX; at run time the system's
# copies serve where it has them (runtime-lib holds only what it lacks).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
debs=${TITAN_GPU_DEPS_DEBS:-$root/.gpu-deps/debs}
case $debs in /*) ;; *) debs=$PWD/$debs ;; esac
arch_dir=lib/x86_64-linux-gnu

# Runtime + -dev of what TitanDependencies.cmake finds, plus what their
# CMake configs and Titan's headers pull in. Debian 12 (bookworm) names.
packages=(
  libyaml-cpp-dev libyaml-cpp0.7       # yaml-cpp 0.7
  libspdlog-dev libspdlog1.10          # spdlog 1.10 (built against the system fmt: SPDLOG_FMT_EXTERNAL)
  libfmt-dev libfmt9                   # fmt 9
  nlohmann-json3-dev doctest-dev       # header-only
  libboost1.74-dev                     # Boost headers (Boost.DLL; header-only with BOOST_DLL_USE_STD_FS)
  libpcre2-dev libpcre2-8-0            # PCRE2 (pkg-config libpcre2-8)
  zlib1g-dev zlib1g                    # zlib headers; zlib1g for libz.so's target
  libgloo-dev                          # Gloo headers: LibTorch's ProcessGroupGloo.hpp includes <gloo/...>
  pkgconf-bin libpkgconf3              # pkg-config, for pkg_check_modules(PCRE2)
)
carry_limit_mib=64   # the device tool's limit for the tree + carried paths
bundle_limit_mib=40  # leave room for the tree itself

die() { echo "gpu_deps: $*" >&2; exit 1; }
size_mib() { du -sbL "$1" | awk '{printf "%.1f", $1 / 1048576}'; }

fetch() {
  command -v apt-get >/dev/null || die "fetch needs apt-get (run it on the Debian 12 development machine)"
  if ! grep -q '^VERSION_ID="12"' /etc/os-release 2>/dev/null; then
    echo "gpu_deps: warning: not Debian 12; the .debs will be this release's" >&2
  fi
  mkdir -p "$debs"
  rm -f "$debs"/*.deb
  # apt-get download runs as the _apt user where it can; a folder it cannot
  # write only costs a warning (it then downloads as the caller).
  (cd "$debs" && apt-get download "${packages[@]}") ||
    die "apt-get download failed; run 'apt-get update' and try again"
  # Plain names (apt writes the epoch's ':' as %3a): letters, digits, . _ - only.
  local deb plain n
  for deb in "$debs"/*.deb; do
    plain=$(basename "$deb" | tr -c 'A-Za-z0-9._\n-' '_')
    [ "$plain" = "$(basename "$deb")" ] || mv "$deb" "$debs/$plain"
  done
  n=$(find "$debs" -name '*.deb' | wc -l)
  [ "$n" -eq "${#packages[@]}" ] || die "expected ${#packages[@]} .deb files in $debs, found $n"
  report_size
}

report_size() {
  [ -d "$debs" ] || die "$debs does not exist; run: scripts/gpu_deps.sh fetch"
  local mib
  mib=$(size_mib "$debs")
  echo "gpu_deps: $(find "$debs" -name '*.deb' | wc -l) .deb files, $mib MiB in $debs" \
       "(carry limit $carry_limit_mib MiB with the tree)"
  awk -v m="$mib" -v l="$bundle_limit_mib" 'BEGIN { exit !(m > l) }' &&
    die "the bundle is over $bundle_limit_mib MiB; trim the package list"
  return 0
}

# One .deb's data archive into PREFIX, without dpkg if need be. Archive
# mtimes are kept (tar and dpkg-deb keep them), so unpacking again does not
# make ninja rebuild what includes these headers.
extract_deb() {
  local deb=$1 prefix=$2
  if command -v dpkg-deb >/dev/null && [ -z "${TITAN_GPU_DEPS_NO_DPKG:-}" ]; then
    dpkg-deb -x "$deb" "$prefix"
    return
  fi
  local tmp member
  tmp=$(mktemp -d)
  if command -v ar >/dev/null && command -v tar >/dev/null && [ -z "${TITAN_GPU_DEPS_NO_AR:-}" ]; then
    (cd "$tmp" && ar x "$deb")
    member=$(cd "$tmp" && ls data.tar* 2>/dev/null | head -1)
    [ -n "$member" ] || die "$deb has no data.tar.* member"
    case $member in  # tar picks the decompressor from -a only for creation; name it
      *.xz)  if command -v xz >/dev/null; then tar -xJf "$tmp/$member" -C "$prefix"; rm -rf "$tmp"; return; fi ;;
      *.zst) if command -v zstd >/dev/null; then tar --zstd -xf "$tmp/$member" -C "$prefix"; rm -rf "$tmp"; return; fi ;;
      *.gz)  tar -xzf "$tmp/$member" -C "$prefix"; rm -rf "$tmp"; return ;;
      *)     tar -xf "$tmp/$member" -C "$prefix"; rm -rf "$tmp"; return ;;
    esac
  fi
  rm -rf "$tmp"
  # No dpkg, no ar, or no decompressor for the member: python3 reads both
  # formats (ar is a 60-byte header per member; tarfile handles xz and gz).
  python3 - "$deb" "$prefix" <<'PY'
import io, sys, tarfile
deb, prefix = sys.argv[1], sys.argv[2]
data = open(deb, "rb").read()
if not data.startswith(b"!<arch>\n"):
    sys.exit(f"gpu_deps: {deb} is not an ar archive")
pos = 8
while pos + 60 <= len(data):
    name = data[pos:pos + 16].decode().strip().rstrip("/")
    size = int(data[pos + 48:pos + 58].decode().strip())
    body = data[pos + 60:pos + 60 + size]
    pos += 60 + size + (size & 1)
    if name.startswith("data.tar"):
        if name.endswith(".zst"):
            sys.exit(f"gpu_deps: {deb}: zstd member and no zstd binary")
        with tarfile.open(fileobj=io.BytesIO(body), mode="r:*") as tar:
            kw = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}
            tar.extractall(prefix, **kw)
        break
else:
    sys.exit(f"gpu_deps: {deb} has no data.tar member")
PY
}

# Rewrite FILE with sed, keeping its mtime (CMake re-runs configure when a
# config file it read gets newer).
sed_keep_mtime() {
  local file=$1; shift
  local ref
  ref=$(mktemp)
  touch -r "$file" "$ref"
  sed -i "$@" "$file"
  touch -r "$ref" "$file"
  rm -f "$ref"
}

# LINK -> TARGET, relative where ln can (the prefix may move).
relink() { ln -sfnr "$1" "$2" 2>/dev/null || ln -sfn "$1" "$2"; }

# Is a shared library of this name (a soname) installed on the system?
system_has_lib() {
  local name=$1 dir
  if command -v ldconfig >/dev/null || [ -x /sbin/ldconfig ]; then
    "$(command -v ldconfig || echo /sbin/ldconfig)" -p 2>/dev/null | grep -q "^[[:space:]]*$name " && return 0
  fi
  for dir in /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /lib64 /usr/lib64 /usr/lib /lib /usr/local/lib; do
    [ -e "$dir/$name" ] && return 0
  done
  return 1
}

unpack() {
  local prefix=${1:?usage: gpu_deps.sh unpack PREFIX}
  [ -d "$debs" ] && compgen -G "$debs/*.deb" >/dev/null ||
    die "no .deb files in $debs; run 'scripts/gpu_deps.sh fetch' on the Debian machine and carry .gpu-deps"
  mkdir -p "$prefix"
  prefix=$(cd "$prefix" && pwd)
  [ "$prefix" != / ] || die "unpack into a folder of its own, not /"
  local stamp=$prefix/.titan-gpu-deps-stamp want f
  want=$(cd "$debs" && for f in *.deb; do echo "$(wc -c <"$f") $f"; done)
  if [ -f "$stamp" ]; then
    if [ "$(cat "$stamp")" = "$want" ]; then
      echo "gpu_deps: $prefix is up to date"
      return
    fi
    rm -rf "${prefix:?}/usr" "${prefix:?}/lib" "${prefix:?}/bin" "${prefix:?}/runtime-lib" "$stamp"  # an older bundle's
  fi
  local deb
  for deb in "$debs"/*.deb; do extract_deb "$deb" "$prefix"; done

  # 1. Absolute symbolic links (libz.so -> /lib/x86_64-linux-gnu/libz.so.1.2.13)
  #    point into PREFIX instead, where the target was unpacked too.
  local link target
  while IFS= read -r -d '' link; do
    target=$(readlink "$link")
    case $target in /*) ;; *) continue ;; esac
    if [ -e "$prefix$target" ]; then
      relink "$prefix$target" "$link"
    elif [ -e "$prefix/usr$target" ]; then  # Debian's merged /usr
      relink "$prefix/usr$target" "$link"
    fi
  done < <(find "$prefix" -type l -print0)

  # 2. pkg-config files: prefix=/usr (and fmt's exec_prefix=/usr).
  local pc
  while IFS= read -r -d '' pc; do
    sed_keep_mtime "$pc" -e "s|^prefix=/usr\$|prefix=$prefix/usr|" -e "s|^exec_prefix=/usr\$|exec_prefix=$prefix/usr|"
  done < <(find "$prefix" -name '*.pc' -print0)

  # 3. CMake target files that hard-code the install prefix (doctest's
  #    `set(_IMPORT_PREFIX "/usr")`): computed from the file's place instead.
  #    yaml-cpp's, spdlog's, fmt's, nlohmann_json's and Boost's configs
  #    already compute it from their own location.
  local cmake_file dir up
  while IFS= read -r -d '' cmake_file; do
    dir=$(dirname "${cmake_file#"$prefix"/usr/}")  # e.g. lib/cmake/doctest
    up=$(echo "$dir" | awk -F/ '{ s = ""; for (i = 1; i <= NF; i++) s = s "/.."; print s }')
    sed_keep_mtime "$cmake_file" \
      "s|^set(_IMPORT_PREFIX \"/usr\")|get_filename_component(_IMPORT_PREFIX \"\${CMAKE_CURRENT_LIST_DIR}$up\" ABSOLUTE)|"
  done < <(grep -rlZ --include='*.cmake' '^set(_IMPORT_PREFIX "/usr")' "$prefix" || true)
  # What would still send CMake to /usr (none expected: report, not fatal).
  # Gloo's config names its library, which is not bundled: Titan uses only
  # Gloo's headers (LibTorch links Gloo in), never find_package(Gloo).
  grep -rn --include='*.cmake' -E '(INTERFACE_INCLUDE_DIRECTORIES|IMPORTED_LOCATION[A-Z_]*) "/usr' "$prefix" |
    grep -v '/cmake/Gloo/' | sed 's/^/gpu_deps: warning: absolute path left: /' >&2 || true

  # 4. pkg-config: the bundled pkgconf behind a wrapper that knows its
  #    library and PREFIX's .pc folders (CMake stores the wrapper's path).
  mkdir -p "$prefix/bin"
  cat >"$prefix/bin/pkg-config" <<EOF
#!/bin/sh
# Written by scripts/gpu_deps.sh: the bundled pkgconf, reading only $prefix's .pc files.
export LD_LIBRARY_PATH="$prefix/usr/$arch_dir\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export PKG_CONFIG_LIBDIR="$prefix/usr/$arch_dir/pkgconfig:$prefix/usr/share/pkgconfig"
exec "$prefix/usr/bin/pkgconf" "\$@"
EOF
  chmod +x "$prefix/bin/pkg-config"

  # 5. PREFIX/runtime-lib: links to the bundled shared libraries (by soname)
  #    that the system lacks, for LD_LIBRARY_PATH. The ones it has (libz.so.1,
  #    libpcre2-8.so.0 on any usual image) stay the system's.
  rm -rf "$prefix/runtime-lib"
  mkdir -p "$prefix/runtime-lib"
  local lib name
  for lib in "$prefix/usr/$arch_dir"/lib*.so.* "$prefix/$arch_dir"/lib*.so.*; do
    [ -L "$lib" ] || continue  # sonames are the links (libfmt.so.9 -> libfmt.so.9.1.0)
    name=$(basename "$lib")
    system_has_lib "$name" || ln -sfn "$lib" "$prefix/runtime-lib/$name"
  done

  echo "$want" >"$stamp"
  echo "gpu_deps: unpacked $(find "$debs" -name '*.deb' | wc -l) .debs into $prefix" \
       "(runtime-lib: $(ls "$prefix/runtime-lib" | tr '\n' ' '))"
}

cmake_args() {
  local prefix=${1:?usage: gpu_deps.sh cmake-args PREFIX}
  prefix=$(cd "$prefix" && pwd)
  local cm=$prefix/usr/$arch_dir/cmake
  local boost
  boost=$(ls -d "$cm"/Boost-* | head -1)
  printf '%s\n' \
    "-Dyaml-cpp_DIR=$cm/yaml-cpp" \
    "-Dspdlog_DIR=$cm/spdlog" \
    "-Dfmt_DIR=$cm/fmt" \
    "-Dnlohmann_json_DIR=$prefix/usr/share/cmake/nlohmann_json" \
    "-Ddoctest_DIR=$prefix/usr/lib/cmake/doctest" \
    "-DBoost_DIR=$boost" \
    "-DBoost_NO_SYSTEM_PATHS=ON" \
    "-DZLIB_INCLUDE_DIR=$prefix/usr/include" \
    "-DZLIB_LIBRARY=$prefix/usr/$arch_dir/libz.so" \
    "-DPKG_CONFIG_EXECUTABLE=$prefix/bin/pkg-config"
}

case ${1:-} in
  fetch) fetch ;;
  unpack) unpack "${2:-}" ;;
  cmake-args) cmake_args "${2:-}" ;;
  size) report_size ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
