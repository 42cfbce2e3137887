# titan_add_plugin(NAME SOURCES ... [LIBRARIES ...]): builds one Titan plugin
# library libtitan_plugin_<NAME>.so that exports only its descriptor. Used
# in-tree and, installed with the SDK, by out-of-tree plugins.
set(TITAN_PLUGIN_VERSION_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/titan_plugin.map)

function(titan_add_plugin name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBRARIES;KINDS" ${ARGN})
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "titan_add_plugin(${name}): SOURCES is empty")
  endif()
  set(target titan_plugin_${name})
  add_library(${target} MODULE ${ARG_SOURCES})
  if(TARGET titan_core)
    target_link_libraries(${target} PRIVATE titan_core)
  else()
    target_link_libraries(${target} PRIVATE Titan::core)
  endif()
  target_link_libraries(${target} PRIVATE ${ARG_LIBRARIES})
  target_link_options(${target} PRIVATE
    "-Wl,--version-script=${TITAN_PLUGIN_VERSION_SCRIPT}" "-Wl,--no-undefined")
  if(NOT TITAN_PLUGIN_OUTPUT_DIR)
    set(TITAN_PLUGIN_OUTPUT_DIR ${CMAKE_BINARY_DIR}/plugins)
  endif()
  set_target_properties(${target} PROPERTIES
    PREFIX "lib"
    LIBRARY_OUTPUT_DIRECTORY ${TITAN_PLUGIN_OUTPUT_DIR}
    INSTALL_RPATH "$ORIGIN/../..")
  if(TARGET titan_all_plugins)
    add_dependencies(titan_all_plugins ${target})
  endif()
  if(COMMAND titan_use_pch)
    titan_use_pch(${target})
  endif()
  if(TITAN_PLUGIN_INSTALL_DIR)
    install(TARGETS ${target} LIBRARY DESTINATION ${TITAN_PLUGIN_INSTALL_DIR})
  endif()
endfunction()
