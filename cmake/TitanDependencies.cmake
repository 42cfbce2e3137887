# Finds LibTorch (Debian's 1.13 CPU build or a PyTorch 2.x install through
# CMAKE_PREFIX_PATH) and the other libraries, and builds the shared
# precompiled header target every LibTorch-using target reuses.
find_package(Torch REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(Boost REQUIRED)
find_package(ZLIB REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)

if(TITAN_WITH_CUDA STREQUAL "AUTO")
  if(TORCH_CUDA_LIBRARIES OR CAFFE2_USE_CUDA)
    set(TITAN_WITH_CUDA ON)
  else()
    set(TITAN_WITH_CUDA OFF)
  endif()
endif()
if(TITAN_WITH_CUDA)
  enable_language(CUDA)
endif()
message(STATUS "Titan: LibTorch ${Torch_VERSION}, CUDA ${TITAN_WITH_CUDA}")

# Flags shared by the PCH and every target that reuses it (they must match).
add_library(titan_build_flags INTERFACE)
target_compile_options(titan_build_flags INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
target_compile_definitions(titan_build_flags INTERFACE BOOST_DLL_USE_STD_FS
  $<$<BOOL:${TITAN_WITH_CUDA}>:TITAN_WITH_CUDA=1>)

# One precompiled LibTorch header, reused by every LibTorch target
# (compiling <torch/torch.h> costs ~20 s per file on 2 cores, ~8 s with it).
file(CONFIGURE OUTPUT ${CMAKE_BINARY_DIR}/titan_pch_anchor.cpp CONTENT "// anchor for the precompiled header\n")
add_library(titan_pch OBJECT ${CMAKE_BINARY_DIR}/titan_pch_anchor.cpp)
target_link_libraries(titan_pch PUBLIC titan_build_flags ${TORCH_LIBRARIES})
target_precompile_headers(titan_pch PRIVATE <torch/torch.h>)

function(titan_use_pch target)
  # The PCH is built with -fPIC; executables would get -fPIE, which GCC
  # treats as a different setting and silently ignores the PCH.
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "EXECUTABLE")
    set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE OFF)
    target_compile_options(${target} PRIVATE -fPIC)
  endif()
  target_precompile_headers(${target} REUSE_FROM titan_pch)
endfunction()
