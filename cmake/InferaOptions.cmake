# Build options shared by every target: warnings, sanitizers, fuzzers. Linked PRIVATE everywhere
# through the infera_options / infera_warnings INTERFACE targets (cpp-best-practices/cmake_template).
option(INFERA_WERROR "Treat warnings as errors" OFF)
set(INFERA_SANITIZE "" CACHE STRING "Sanitizers: '', 'address,undefined' or 'thread'")
option(INFERA_FUZZ "Build libFuzzer targets (needs clang)" OFF)
option(INFERA_BENCH "Build Google Benchmark binaries" ON)
# The infera binary's allocator (docs/decisions/0002-jemalloc.md). Sanitizers bring their own, so
# sanitizer and fuzz builds stay on libc's.
if(INFERA_SANITIZE OR INFERA_FUZZ)
  set(infera_jemalloc_default OFF)
else()
  set(infera_jemalloc_default ON)
endif()
option(INFERA_JEMALLOC "Link the infera binary with jemalloc (Debian libjemalloc-dev)" ${infera_jemalloc_default})
if(INFERA_JEMALLOC)
  find_library(INFERA_JEMALLOC_LIBRARY NAMES jemalloc)
  if(NOT INFERA_JEMALLOC_LIBRARY)
    message(FATAL_ERROR "INFERA_JEMALLOC is on but libjemalloc was not found: run scripts/install-deps "
                        "(Debian libjemalloc-dev), or configure with -DINFERA_JEMALLOC=OFF")
  endif()
endif()

add_library(infera_options INTERFACE)
add_library(infera_warnings INTERFACE)

target_compile_definitions(infera_options INTERFACE
  BOOST_ASIO_NO_DEPRECATED
  BOOST_ASIO_SEPARATE_COMPILATION
  BOOST_BEAST_SEPARATE_COMPILATION
  BOOST_JSON_NO_LIB
  BOOST_URL_NO_LIB
  # Clang 14 with libstdc++ is not detected as coroutine-capable by Asio (aesthetics.md, 4).
  $<$<CXX_COMPILER_ID:Clang>:BOOST_ASIO_HAS_CO_AWAIT=1 BOOST_ASIO_HAS_STD_COROUTINE=1>)

set(INFERA_COMMON_WARNINGS
  -Wall -Wextra -Wshadow -Wnon-virtual-dtor -Wcast-align -Wunused -Woverloaded-virtual
  -Wpedantic -Wdouble-promotion -Wformat=2 -Wimplicit-fallthrough
  -Wno-missing-field-initializers  # designated initializers leave the rest defaulted on purpose
  $<$<CXX_COMPILER_ID:GNU>:-Wmisleading-indentation -Wduplicated-cond -Wlogical-op>
  # GCC 12 + Asio coroutines: false positives under optimisation and sanitizers (aesthetics.md, 4).
  $<$<CXX_COMPILER_ID:GNU>:-Wno-mismatched-new-delete -Wno-maybe-uninitialized>
  # Unity builds (the asan and tsan presets: docs/decisions/0003-unity-sanitizer-builds.md) include
  # each .cc into a batch file, and GCC then warns about every class member whose type comes from
  # that .cc's anonymous namespace, as it would in a header. In a .cc it is the intended pattern.
  $<$<AND:$<BOOL:${CMAKE_UNITY_BUILD}>,$<CXX_COMPILER_ID:GNU>>:-Wno-subobject-linkage>
  $<$<BOOL:${INFERA_WERROR}>:-Werror>)
# Library code also checks integer conversions; tests and benchmarks (infera_test_warnings) do
# not, where it would only add casts to literal arithmetic.
target_compile_options(infera_warnings INTERFACE ${INFERA_COMMON_WARNINGS} -Wconversion -Wsign-conversion)
add_library(infera_test_warnings INTERFACE)
target_compile_options(infera_test_warnings INTERFACE ${INFERA_COMMON_WARNINGS})

if(INFERA_SANITIZE)
  target_compile_options(infera_options INTERFACE -fsanitize=${INFERA_SANITIZE} -fno-omit-frame-pointer)
  target_link_options(infera_options INTERFACE -fsanitize=${INFERA_SANITIZE})
  if(INFERA_SANITIZE STREQUAL "thread" AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_compile_options(infera_options INTERFACE -Wno-tsan)
  endif()
  if(INFERA_SANITIZE MATCHES "undefined")
    target_compile_options(infera_options INTERFACE -fno-sanitize-recover=undefined)
  endif()
endif()

if(INFERA_FUZZ)
  target_compile_options(infera_options INTERFACE -fsanitize=fuzzer-no-link,address,undefined)
  target_link_options(infera_options INTERFACE -fsanitize=address,undefined)
endif()

# Clang 14 cannot compile coroutines with UBSan's function check ("Cannot represent a difference
# across sections"); it adds nothing for C++ code that makes no indirect calls through casts.
if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang" AND (INFERA_FUZZ OR INFERA_SANITIZE MATCHES "undefined"))
  target_compile_options(infera_options INTERFACE -fno-sanitize=function)
endif()
