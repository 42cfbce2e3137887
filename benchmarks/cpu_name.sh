# Sourced by the CPU benchmarks: `cpu_name` prints the CPU's vendor and
# model, the widest vector ISA LibTorch's kernels can use on it (MKL and
# oneDNN pick their code paths by it) and the core count.
cpu_name() {
  local model vendor flags isa=AVX2
  model=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
  vendor=$(grep -m1 'vendor_id' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
  flags=$(grep -m1 '^flags' /proc/cpuinfo)
  [[ $flags == *" avx512f "* ]] && isa=AVX-512
  [[ $flags == *" amx_tile "* ]] && isa="AVX-512 + AMX"
  echo "$vendor $model, $isa, $(nproc) cores"
}
