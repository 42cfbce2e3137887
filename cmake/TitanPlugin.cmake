# titan_add_plugin(NAME SOURCES ... [LIBRARIES ...] [KINDS ...] [CONFORMANCE FILE]): builds one
# Titan plugin library libtitan_plugin_<NAME>.so that exports only its
# descriptor, into TITAN_PLUGIN_OUTPUT_DIR (default <build>/plugins), and
# installs it into TITAN_PLUGIN_INSTALL_DIR when set. KINDS (model,
# optimizer, ...) documents what the descriptor declares; the descriptor is
# what titan trusts. CONFORMANCE: the plugin's declaration for
# titan-conformance (e.g. the optimizer rule it implements), copied beside
# the library as libtitan_plugin_<NAME>.conformance.yaml and installed with it.
# The sources see TITAN_PLUGIN_NAME defined as "<NAME>", for
# TITAN_PLUGIN(TITAN_PLUGIN_NAME, ...): the descriptor's name is the file's.
# Used in-tree and, installed with the SDK, out of tree. In-tree plugins join
# the target titan_all_plugins (what training needs) unless the directory
# sets TITAN_PLUGIN_NOT_IN_ALL (the test plugins).
# The sources compile into the object library titan_plugin_<NAME>_objects
# (compile settings go there), which the plugin links: a variant built from
# the same sources less one (tests/harness_plugins' mutants) links those
# objects through OBJECTS instead of compiling them again.
set(TITAN_PLUGIN_VERSION_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/titan_plugin.map)
# The kinds of titan/plugin.hpp (TITAN_SINGLE_FACTORY_KINDS, then pipeline_schedule).
set(TITAN_PLUGIN_KIND_NAMES model parallelizer microbatch_runner optimizer lr_schedule precision checkpointer
  comm_observer metrics_sink pipeline_splitter pipeline_schedule)

function(titan_add_plugin name)
  cmake_parse_arguments(ARG "" "CONFORMANCE" "SOURCES;OBJECTS;LIBRARIES;KINDS" ${ARGN})
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "titan_add_plugin(${name}): SOURCES is empty")
  endif()
  foreach(kind IN LISTS ARG_KINDS)
    if(NOT kind IN_LIST TITAN_PLUGIN_KIND_NAMES)
      message(FATAL_ERROR "titan_add_plugin(${name}): unknown KINDS entry '${kind}' "
        "(known: ${TITAN_PLUGIN_KIND_NAMES})")
    endif()
  endforeach()
  set(target titan_plugin_${name})
  if(TARGET titan_core)
    set(core titan_core)
  else()  # out of tree, against the installed SDK
    set(core Titan::core)
  endif()
  add_library(${target}_objects OBJECT ${ARG_SOURCES})
  set_target_properties(${target}_objects PROPERTIES POSITION_INDEPENDENT_CODE ON)
  # One source can then build under several names (tests/harness_plugins' mutants).
  target_compile_definitions(${target}_objects PRIVATE TITAN_PLUGIN_NAME="${name}")
  target_link_libraries(${target}_objects PRIVATE ${core} ${ARG_LIBRARIES})
  add_library(${target} MODULE $<TARGET_OBJECTS:${target}_objects> ${ARG_OBJECTS})
  set_target_properties(${target} PROPERTIES LINKER_LANGUAGE CXX)
  target_link_libraries(${target} PRIVATE ${core} ${ARG_LIBRARIES})
  target_link_options(${target} PRIVATE
    "-Wl,--version-script=${TITAN_PLUGIN_VERSION_SCRIPT}" "-Wl,--no-undefined")
  if(NOT TITAN_PLUGIN_OUTPUT_DIR)
    set(TITAN_PLUGIN_OUTPUT_DIR ${CMAKE_BINARY_DIR}/plugins)
  endif()
  set_target_properties(${target} PROPERTIES
    PREFIX "lib"
    LIBRARY_OUTPUT_DIRECTORY ${TITAN_PLUGIN_OUTPUT_DIR}
    INSTALL_RPATH "$ORIGIN/../..;${TITAN_TORCH_LIBRARY_DIR}"
    TITAN_PLUGIN_KINDS "${ARG_KINDS}")
  if(TARGET titan_all_plugins AND NOT TITAN_PLUGIN_NOT_IN_ALL)
    add_dependencies(titan_all_plugins ${target})
  endif()
  if(COMMAND titan_use_pch)
    titan_use_pch(${target}_objects)
    titan_unity_build(${target}_objects)
  endif()
  if(TITAN_PLUGIN_INSTALL_DIR)
    install(TARGETS ${target} LIBRARY DESTINATION ${TITAN_PLUGIN_INSTALL_DIR})
  endif()
  if(ARG_CONFORMANCE)
    get_filename_component(declaration ${ARG_CONFORMANCE} ABSOLUTE)
    set(copy ${TITAN_PLUGIN_OUTPUT_DIR}/libtitan_plugin_${name}.conformance.yaml)
    configure_file(${declaration} ${copy} COPYONLY)
    if(TITAN_PLUGIN_INSTALL_DIR)
      install(FILES ${copy} DESTINATION ${TITAN_PLUGIN_INSTALL_DIR})
    endif()
  endif()
endfunction()
