# Finds LibTorch (the torch 2.11 wheel's, through CMAKE_PREFIX_PATH; see
# scripts/setup.sh) and the other libraries, and builds the shared
# precompiled header target every LibTorch-using target reuses.
# The GPUs Titan targets: H100/H200 (sm_90). One architecture keeps every
# .cu compile in CI affordable; set TORCH_CUDA_ARCH_LIST for others.
if(NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(ENV{TORCH_CUDA_ARCH_LIST} "9.0")
endif()
find_package(Torch 2.11 REQUIRED)
# .venv lies inside the source tree, so CMake leaves its torch/lib out of
# installed RPATHs: installed programs and plugins name it themselves.
get_filename_component(TITAN_TORCH_LIBRARY_DIR "${TORCH_LIBRARY}" DIRECTORY)
find_package(yaml-cpp REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(Boost REQUIRED)
find_package(ZLIB REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
pkg_check_modules(ZSTD REQUIRED IMPORTED_TARGET libzstd)  # *.jsonl.zst datasets

if(TITAN_WITH_CUDA STREQUAL "AUTO")
  if(TORCH_CUDA_LIBRARIES OR CAFFE2_USE_CUDA)
    set(TITAN_WITH_CUDA ON)
  else()
    set(TITAN_WITH_CUDA OFF)
  endif()
endif()
if(TITAN_WITH_CUDA)
  if(NOT CAFFE2_USE_CUDA)
    message(FATAL_ERROR "TITAN_WITH_CUDA=ON needs a CUDA build of LibTorch; ${Torch_DIR} is CPU-only")
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  # LibTorch does not ship nccl.h: the CUDA toolkit's (CI machines) or the
  # nvidia-nccl wheel's (GPU machines; scripts/gpu_check.sh passes it).
  # The toolkit keeps NCCL in <root>/lib, not lib64, and CI's PATH has only
  # a wrapper nvcc in /usr/local/bin, so look under the toolkit's root too.
  set(titan_cuda_roots ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_TARGET_DIR} $ENV{CUDA_HOME} /usr/local/cuda)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${titan_cuda_roots}
    PATH_SUFFIXES include REQUIRED)
  find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${CUDAToolkit_LIBRARY_DIR} ${titan_cuda_roots}
    PATH_SUFFIXES lib lib64 REQUIRED)
  message(STATUS "Titan: NCCL ${NCCL_LIBRARY} (headers ${NCCL_INCLUDE_DIR})")
endif()
message(STATUS "Titan: LibTorch ${Torch_VERSION}, CUDA ${TITAN_WITH_CUDA}")

# Flags shared by the PCH and every target that reuses it (they must match).
add_library(titan_build_flags INTERFACE)
target_compile_options(titan_build_flags INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
# Lambdas capturing structured bindings (doctest's INFO among them): C++20,
# which GCC and clang both accept in C++17; clang alone says so. By the
# compiler that builds, as the SDK installs these flags for plugins.
target_compile_options(titan_build_flags INTERFACE $<$<COMPILE_LANG_AND_ID:CXX,Clang>:-Wno-c++20-extensions>)
# LibTorch is built by GCC, which mangles a template parameter list as clang
# did until 17; clang 18's newer mangling (TnN...) names symbols libtorch
# does not export, such as TensorBase::const_data_ptr<float>. Also by the
# compiler that builds.
target_compile_options(titan_build_flags INTERFACE
  $<$<AND:$<COMPILE_LANG_AND_ID:CXX,Clang>,$<VERSION_GREATER_EQUAL:$<CXX_COMPILER_VERSION>,18>>:-fclang-abi-compat=17>)
include(TitanTorchWheel)
titan_use_torch_wheel_fixes(titan_build_flags INTERFACE)
target_compile_definitions(titan_build_flags INTERFACE BOOST_DLL_USE_STD_FS
  $<$<BOOL:${TITAN_WITH_CUDA}>:TITAN_WITH_CUDA=1>)

# LibTorch as Titan links it: the CPU libraries only (libtorch_cpu, libc10),
# not the `torch` target, whose libtorch.so pulls in libtorch_cuda and with
# it CUDA, cuDNN, cuBLAS and NCCL (about 0.2 s and 350 MB a process, on
# machines without a GPU too). The compile flags are the whole wheel's, CUDA
# definitions included, so every target shares one precompiled header.
# What needs CUDA links titan_torch_cuda: libtitan_cuda.so (loaded at run
# time where a driver is; core/internal/titan/cuda_runtime.hpp), the fused
# CUDA kernels and their tests.
add_library(titan_torch INTERFACE)
target_link_libraries(titan_torch INTERFACE torch_cpu_library c10)
target_include_directories(titan_torch INTERFACE $<TARGET_PROPERTY:torch,INTERFACE_INCLUDE_DIRECTORIES>)
target_compile_options(titan_torch INTERFACE $<TARGET_PROPERTY:torch,INTERFACE_COMPILE_OPTIONS>)
if(TARGET torch_cuda)
  target_compile_definitions(titan_torch INTERFACE $<TARGET_PROPERTY:torch_cuda,INTERFACE_COMPILE_DEFINITIONS>)
endif()
if(TITAN_WITH_CUDA)
  add_library(titan_torch_cuda INTERFACE)
  target_link_libraries(titan_torch_cuda INTERFACE titan_torch torch_cuda_library c10_cuda ${NCCL_LIBRARY})
  target_include_directories(titan_torch_cuda INTERFACE ${CUDAToolkit_INCLUDE_DIRS} ${NCCL_INCLUDE_DIR})
endif()

# One precompiled LibTorch header, reused by every LibTorch target. It holds
# the parts of LibTorch that Titan uses, not <torch/torch.h>: GCC instantiates
# a header's pending templates again at the end of every file that loads the
# PCH, and torch/torch.h's (its nn modules, optimizers, data loaders) made
# even an empty file cost 13 s on a 2-core AMD EPYC; this set costs 5 s
# (docs/testing.md, "The precompiled header"). A file that needs more of
# LibTorch includes it itself.
file(CONFIGURE OUTPUT ${CMAKE_BINARY_DIR}/titan_pch_anchor.cpp CONTENT "// anchor for the precompiled header\n")
set(titan_pch_headers
  <ATen/ATen.h>
  <torch/types.h>
  <torch/utils.h>
  <torch/autograd.h>
  <torch/nn/module.h>
  <torch/nn/modules/container/moduledict.h>
  <torch/csrc/autograd/custom_function.h>
  <torch/csrc/distributed/c10d/ProcessGroup.hpp>)
function(titan_add_pch target)
  add_library(${target} OBJECT ${CMAKE_BINARY_DIR}/titan_pch_anchor.cpp)
  target_link_libraries(${target} PUBLIC titan_build_flags titan_torch)
  target_precompile_headers(${target} PRIVATE ${titan_pch_headers})
  target_compile_options(${target} PRIVATE ${ARGN})
  if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    # Without the headers' times in it, a PCH that ccache hands back stays
    # valid after LibTorch's headers were installed again (ccache's manual).
    target_compile_options(${target} PRIVATE -Xclang -fno-pch-timestamp)
  endif()
endfunction()
titan_add_pch(titan_pch)

# The code no training step runs (the tests, their programs and plugins,
# the CLI's commands, the conformance tool) compiles at -O0 in the Quick
# build: clang builds such a batch in a third to a half of its -O1 time
# (docs/testing.md, "Orchestration at -O0"), and what those programs spend
# their time in is LibTorch's kernels, the -O1 libraries and the plugins.
# A folder sets TITAN_UNOPTIMIZED_IN_QUICK; its targets take a PCH of their
# own, since a PCH serves only files compiled at its -O.
if(CMAKE_BUILD_TYPE STREQUAL "Quick")
  titan_add_pch(titan_pch_unoptimized -O0)
endif()

# The large targets compile as unity batches: each batch loads the PCH and
# instantiates LibTorch's templates once for several files, which roughly
# quarters their compile time (docs/testing.md). A plugin file that a test
# mutant swaps stays an object of its own (tests/harness_plugins).
option(TITAN_UNITY_BUILD "Compile core, the CLI, the harness, the plugins and the tests in unity batches" ON)
function(titan_unity_build target)
  if(TITAN_UNITY_BUILD)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 16)
    # A class with a member of a file's anonymous-namespace type is fine in
    # its own file; GCC warns once that file is #included into a batch.
    if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
      target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wno-subobject-linkage>)
    endif()
  endif()
endfunction()

function(titan_use_pch target)
  # The PCH is built with -fPIC; executables would get -fPIE, which GCC
  # treats as a different setting and silently ignores the PCH.
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "EXECUTABLE")
    set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE OFF)
    target_compile_options(${target} PRIVATE -fPIC)
  endif()
  if(TITAN_UNOPTIMIZED_IN_QUICK AND TARGET titan_pch_unoptimized)
    target_compile_options(${target} PRIVATE -O0)
    target_precompile_headers(${target} REUSE_FROM titan_pch_unoptimized)
  else()
    target_precompile_headers(${target} REUSE_FROM titan_pch)
  endif()
endfunction()
