include(GoogleTest)
# mcp_gtest(NAME name TIER unit|integration|kernel|e2e SOURCES ... LIBS ...)
# One gtest binary per library; every test is labelled with its tier so
# `ctest -L unit` runs one tier. Integration and e2e tests skip themselves
# (GTEST_SKIP with a reason) when root, BTF or a tool is missing.
function(mcp_gtest)
  cmake_parse_arguments(ARG "" "NAME;TIER;TIMEOUT" "SOURCES;LIBS" ${ARGN})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  add_executable(${ARG_NAME} ${ARG_SOURCES})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_LIBS} GTest::gtest GTest::gmock GTest::gtest_main)
  set_target_properties(${ARG_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  target_compile_definitions(${ARG_NAME} PRIVATE
    MCP_BIN_DIR="${CMAKE_BINARY_DIR}/bin" MCP_TEST_DIR="${CMAKE_BINARY_DIR}/tests"
    MCP_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
  # Integration and e2e tests attach system-wide probes and count what every process does, so two
  # at once see each other's calls: under `ctest -j` they take turns (unit tests still overlap).
  set(lock)
  if(ARG_TIER STREQUAL "integration" OR ARG_TIER STREQUAL "e2e" OR ARG_TIER STREQUAL "kernel")
    set(lock RESOURCE_LOCK kernel_probes)
  endif()
  gtest_discover_tests(${ARG_NAME} DISCOVERY_MODE PRE_TEST
    PROPERTIES LABELS ${ARG_TIER} TIMEOUT ${ARG_TIMEOUT} ${lock}
    # GTEST_SKIP (no root, no BTF, no nvcc, no nats-server) shows as skipped, not passed
    SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
endfunction()
