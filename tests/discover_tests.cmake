# Run after a test program links (titan_tests, titan_cuda_tests; cmake -P):
# lists its doctest cases once, with their source files, and writes one
# CTest test per case labelled by where the
# case lives: its folder (unit, plugins, integration, cuda) and its file's
# stem (plugins/dcp_test -> dcp, integration/dcp_e2e_test -> dcp_e2e; two
# files of one stem are refused), so `ctest -L dcp` (a regular expression:
# both) runs one area and ctest's closing "Label Time Summary" says what each
# area costs. doctest's own discovery runs the binary once more per case to
# label it (a second each).
# A case that prints "TITAN_SKIPPED: <reason>" (a CUDA test without a GPU)
# is reported by ctest as skipped, never as passed.
# Inputs: TEST_EXECUTABLE, WORKING_DIR, TIMEOUT, CTEST_FILE.
cmake_policy(VERSION 3.22)
execute_process(COMMAND "${TEST_EXECUTABLE}" --list-test-cases --reporters=xml
  OUTPUT_VARIABLE listing RESULT_VARIABLE status WORKING_DIRECTORY "${WORKING_DIR}")
if(NOT status EQUAL 0)
  message(FATAL_ERROR "listing the test cases of ${TEST_EXECUTABLE} failed (${status}):\n${listing}")
endif()

# &amp; last, so that an escaped "&amp;quot;" stays "&quot;".
function(xml_unescape out text)
  string(REPLACE "&quot;" "\"" text "${text}")
  string(REPLACE "&apos;" "'" text "${text}")
  string(REPLACE "&lt;" "<" text "${text}")
  string(REPLACE "&gt;" ">" text "${text}")
  string(REPLACE "&amp;" "&" text "${text}")
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

set(script "")
set(count 0)
# One <TestCase .../> a line; doctest leaves '>' in names unescaped, so a
# case ends at the line's end, not at the first '>'. Semicolons (in "&lt;")
# would split CMake's list of cases: they travel as a placeholder.
string(REPLACE ";" "@SEMICOLON@" listing "${listing}")
string(REGEX MATCHALL "<TestCase [^\n]*" cases "${listing}")
foreach(case IN LISTS cases)
  string(REGEX MATCH " name=\"([^\"]*)\"" _ "${case}")
  string(REPLACE "@SEMICOLON@" ";" name "${CMAKE_MATCH_1}")
  xml_unescape(name "${name}")
  if(name STREQUAL "")
    message(FATAL_ERROR "a test case without a name in the listing of ${TEST_EXECUTABLE}: ${case}")
  endif()
  string(REGEX MATCH " filename=\"([^\"]*)\"" _ "${case}")
  set(file "${CMAKE_MATCH_1}")
  get_filename_component(stem "${file}" NAME_WE)
  string(REGEX REPLACE "_test$" "" area "${stem}")
  get_filename_component(folder "${file}" DIRECTORY)
  get_filename_component(tier "${folder}" NAME)
  # One file per label: tests/plugins/x_test.cpp and tests/integration/x_test.cpp
  # would mix a fast area and an end-to-end one under `x`.
  if(DEFINED file_of_${area} AND NOT "${file_of_${area}}" STREQUAL "${file}")
    message(FATAL_ERROR "${file} and ${file_of_${area}} share the test label '${area}': rename one "
      "(docs/testing.md, \"Where a feature's tests live\")")
  endif()
  set(file_of_${area} "${file}")
  # doctest reads commas in --test-case as separators unless escaped.
  string(REPLACE "," "\\," filter "${name}")
  string(APPEND script
    "add_test([==[${name}]==] \"${TEST_EXECUTABLE}\" [==[--test-case=${filter}]==])\n"
    "set_tests_properties([==[${name}]==] PROPERTIES WORKING_DIRECTORY \"${WORKING_DIR}\""
    " TIMEOUT ${TIMEOUT} LABELS \"${tier};${area}\" SKIP_REGULAR_EXPRESSION \"TITAN_SKIPPED:\")\n")
  math(EXPR count "${count} + 1")
endforeach()
# Every case doctest counts must have become one test, or some would never run.
string(REGEX MATCH "<OverallResultsTestCases unskipped=\"([0-9]+)\"" _ "${listing}")
if(count EQUAL 0 OR NOT count EQUAL "${CMAKE_MATCH_1}")
  message(FATAL_ERROR "${count} test cases read from the listing of ${TEST_EXECUTABLE}, which counts "
    "'${CMAKE_MATCH_1}':\n${listing}")
endif()
file(WRITE "${CTEST_FILE}" "${script}")
