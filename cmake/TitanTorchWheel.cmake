# What a program built against the torch wheel's LibTorch needs, in-tree
# and in out-of-tree plugins (installed with the SDK):
# - the wheel's include folder ships fmt 12's headers, while the system's
#   spdlog is built against the system's fmt: every <fmt/...> must be the
#   system's, so a folder holding only a link to it is searched first;
# - the wheel's libtorch.so exports about 180 std:: symbols (static libstdc++
#   extras of its toolchain), among them a std::filesystem::remove_all that
#   crashes when called from here: naming libstdc++ first among a program's
#   libraries makes the dynamic linker bind every std:: symbol to it.
function(titan_use_torch_wheel_fixes target scope)
  find_package(fmt REQUIRED)
  get_target_property(fmt_include fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)
  set(first ${CMAKE_BINARY_DIR}/fmt_first)
  if(NOT EXISTS ${first}/fmt)
    file(MAKE_DIRECTORY ${first})
    file(CREATE_LINK ${fmt_include}/fmt ${first}/fmt SYMBOLIC)
  endif()
  target_include_directories(${target} SYSTEM BEFORE ${scope} $<BUILD_INTERFACE:${first}>)
  target_link_options(${target} ${scope} "LINKER:--push-state,--no-as-needed,-lstdc++,--pop-state")
endfunction()
