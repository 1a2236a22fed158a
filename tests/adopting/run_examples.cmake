# docs/adopting.md's examples (tests/adopting/examples/), as a user builds them: installs the
# build tree to a fresh prefix, configures and builds the examples against it with
# find_package(mempool), runs each (each checks its own result and exits non-zero when wrong),
# then runs the guide's LD_PRELOAD snippet on a program that does not use mempool.
# Under a sanitizer (SANITIZERS set) the mempool::override and LD_PRELOAD examples are skipped:
# the sanitizer replaces malloc itself.
cmake_minimum_required(VERSION 3.25)
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
set(examples ${SOURCE_DIR}/tests/adopting/examples)
set(build ${WORK_DIR}/build)
include(${CMAKE_CURRENT_LIST_DIR}/../cmake/run_or_fail.cmake)

run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
# The examples are meant to be copied: they must build without a warning.
set(flags "-Wall -Wextra -Werror")
set(with_override ON)
if(SANITIZERS)
  # An instrumented library: the examples link the sanitizer runtime too.
  string(APPEND flags " -fsanitize=${SANITIZERS}")
  set(with_override OFF)
endif()
run(${CMAKE_COMMAND} -S ${examples} -B ${build} -G ${GENERATOR} -DCMAKE_CXX_COMPILER=${CXX}
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_CXX_FLAGS=${flags} -DWITH_OVERRIDE=${with_override})
run(${CMAKE_COMMAND} --build ${build})

run(${build}/heap_api/engine)
run(${build}/pools/orders)
run(${build}/compat/legacy)
run(${build}/preload/plain)
if(NOT with_override)
  message(STATUS "skipped: the mempool::override and LD_PRELOAD examples (${SANITIZERS} "
                 "replaces malloc itself; they run in the release, debug and checked presets)")
  return()
endif()
run(${build}/override/server)
execute_process(COMMAND ${CMAKE_COMMAND} -E env MEMPOOL_VERBOSE=1 ${build}/override/server
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0 OR NOT out MATCHES "mempool: version [0-9.]+ active as malloc and operator new")
  message(FATAL_ERROR "MEMPOOL_VERBOSE=1 server (${rc}): no 'active as malloc' line:\n${out}")
endif()

# The guide's snippet, as written, on the unchanged program and the installed library.
file(GLOB_RECURSE lib ${prefix}/*/libmempool-malloc.so)
if(NOT lib)
  message(FATAL_ERROR "libmempool-malloc.so was not installed under ${prefix}")
endif()
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env MEMPOOL_LIB=${lib} APP=${build}/preload/plain
          sh ${examples}/preload/preload.sh
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
message(STATUS "preload.sh with MEMPOOL_LIB=${lib} APP=${build}/preload/plain:\n${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "preload.sh failed (${rc})")
endif()
foreach(expected "mempool: version [0-9.]+ active as malloc and operator new" "plain 1\n.*plain 1"
                 "mempool heap statistics\n  in use")
  if(NOT out MATCHES "${expected}")
    message(FATAL_ERROR "preload.sh: no match for '${expected}' in its output")
  endif()
endforeach()
