# What a program built against the torch wheel's LibTorch needs, in-tree
# and in out-of-tree plugins (installed with the SDK):
# - the wheel's include folder ships fmt 12's headers, while the system's
#   spdlog is built against the system's fmt: every <fmt/...> must be the
#   system's, so a folder holding only a link to it is searched first;
# - the wheel's libtorch.so exports about 180 std:: symbols (static libstdc++
#   extras of its toolchain), among them a std::filesystem::remove_all that
#   crashes when called from here: naming the shared libstdc++ first among a
#   program's libraries makes the dynamic linker bind every std:: symbol to
#   it. By path, not `-lstdc++`: a GCC without a shared libstdc++ of its own
#   (the GPU machine's /opt/gcc 13) links the static archive for that, which
#   adds no dependency, and remove_all then crashed every test that cleans up.
function(titan_shared_libstdcxx out)
  if(NOT TITAN_SHARED_LIBSTDCXX)
    execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libstdc++.so.6
                    OUTPUT_VARIABLE path OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(NOT IS_ABSOLUTE "${path}" OR NOT EXISTS "${path}")
      find_library(titan_system_libstdcxx NAMES libstdc++.so.6)  # the system's, where the compiler has none
      set(path ${titan_system_libstdcxx})
    endif()
    if(NOT path)
      message(FATAL_ERROR "Titan: no shared libstdc++ (libstdc++.so.6) found beside ${CMAKE_CXX_COMPILER} or in "
                          "the system's library folders; programs linked against the torch wheel need it first "
                          "(set TITAN_SHARED_LIBSTDCXX to its path)")
    endif()
    get_filename_component(path "${path}" REALPATH)
    set(TITAN_SHARED_LIBSTDCXX ${path} CACHE FILEPATH "the shared libstdc++ every Titan program names first")
    message(STATUS "Titan: std:: symbols bind to ${path} (before libtorch's copies)")
  endif()
  set(${out} ${TITAN_SHARED_LIBSTDCXX} PARENT_SCOPE)
endfunction()

function(titan_use_torch_wheel_fixes target scope)
  find_package(fmt REQUIRED)
  get_target_property(fmt_include fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)
  set(first ${CMAKE_BINARY_DIR}/fmt_first)
  if(NOT EXISTS ${first}/fmt)
    file(MAKE_DIRECTORY ${first})
    file(CREATE_LINK ${fmt_include}/fmt ${first}/fmt SYMBOLIC)
  endif()
  target_include_directories(${target} SYSTEM BEFORE ${scope} $<BUILD_INTERFACE:${first}>)
  titan_shared_libstdcxx(libstdcxx)
  target_link_options(${target} ${scope} "LINKER:--push-state,--no-as-needed" ${libstdcxx} "LINKER:--pop-state")
endfunction()
