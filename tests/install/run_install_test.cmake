# Installs the build tree to a fresh prefix, then configures, builds and runs
# tests/install/consumer against it with find_package(mempool).
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
include(${CMAKE_CURRENT_LIST_DIR}/../cmake/run_or_fail.cmake)
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
# A sanitizer build installs an instrumented library: the consumer links the runtime too.
set(flags "")
if(SANITIZERS)
  set(flags "-fsanitize=${SANITIZERS}")
endif()
# A sanitizer replaces malloc itself: the drop-in library cannot be tried there.
set(with_override ON)
if(SANITIZERS)
  set(with_override OFF)
endif()
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/install/consumer -B ${WORK_DIR}/build -G ${GENERATOR}
    -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_CXX_FLAGS=${flags}
    -DWITH_OVERRIDE=${with_override})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${WORK_DIR}/build/consumer)
if(with_override)
  run(${WORK_DIR}/build/override_consumer)
  # The installed preload library takes over an unchanged program.
  file(GLOB_RECURSE preload ${prefix}/*/libmempool-malloc.so)
  if(NOT preload)
    message(FATAL_ERROR "libmempool-malloc.so was not installed under ${prefix}")
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} -E env MEMPOOL_VERBOSE=1 LD_PRELOAD=${preload}
                          ${WORK_DIR}/build/consumer
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "active as malloc and operator new")
    message(FATAL_ERROR "consumer under LD_PRELOAD=${preload} failed (${rc}):\n${out}")
  endif()
endif()
