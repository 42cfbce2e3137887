# Run after titan_tests links (cmake -P): lists its doctest cases once, with
# their source files, and writes one CTest test per case labelled by where the
# case lives: its folder (unit, plugins, integration) and its file's stem
# (dcp_test -> dcp), so `ctest -L dcp` runs one area and ctest's closing
# "Label Time Summary" says what each area costs. doctest's own discovery
# runs the binary once more per case to label it (a second each).
# Inputs: TEST_EXECUTABLE, WORKING_DIR, TIMEOUT, CTEST_FILE.
execute_process(COMMAND "${TEST_EXECUTABLE}" --list-test-cases --reporters=xml
  OUTPUT_VARIABLE listing RESULT_VARIABLE status WORKING_DIRECTORY "${WORKING_DIR}")
if(NOT status EQUAL 0)
  message(FATAL_ERROR "listing the test cases of ${TEST_EXECUTABLE} failed (${status}):\n${listing}")
endif()

function(xml_unescape out text)
  foreach(pair "&quot;|\"" "&apos;|'" "&lt;|<" "&gt;|>" "&amp;|&")
    string(REPLACE "|" ";" pair "${pair}")
    list(GET pair 0 from)
    list(GET pair 1 to)
    string(REPLACE "${from}" "${to}" text "${text}")
  endforeach()
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

set(script "")
set(count 0)
string(REGEX MATCHALL "<TestCase [^>]*>" cases "${listing}")
foreach(case IN LISTS cases)
  string(REGEX MATCH " name=\"([^\"]*)\"" _ "${case}")
  xml_unescape(name "${CMAKE_MATCH_1}")
  string(REGEX MATCH " filename=\"([^\"]*)\"" _ "${case}")
  set(file "${CMAKE_MATCH_1}")
  get_filename_component(stem "${file}" NAME_WE)
  string(REGEX REPLACE "_test$" "" area "${stem}")
  get_filename_component(folder "${file}" DIRECTORY)
  get_filename_component(tier "${folder}" NAME)
  # doctest reads commas in --test-case as separators unless escaped.
  string(REPLACE "," "\\," filter "${name}")
  string(APPEND script
    "add_test([==[${name}]==] \"${TEST_EXECUTABLE}\" [==[--test-case=${filter}]==])\n"
    "set_tests_properties([==[${name}]==] PROPERTIES WORKING_DIRECTORY \"${WORKING_DIR}\""
    " TIMEOUT ${TIMEOUT} LABELS \"${tier};${area}\")\n")
  math(EXPR count "${count} + 1")
endforeach()
if(count EQUAL 0)
  message(FATAL_ERROR "no test cases found in the listing of ${TEST_EXECUTABLE}:\n${listing}")
endif()
file(WRITE "${CTEST_FILE}" "${script}")
