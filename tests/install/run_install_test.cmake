# Installs the build tree to a fresh prefix, then builds tests/install/consumer against
# it as users do: with find_package(mempool) (mempool::mempool is libmempool.so.0; the
# `static` component gives libmempool.a) and with g++ $(pkg-config --cflags --libs
# mempool) / mempool-malloc, and runs each.
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
set(consumer ${SOURCE_DIR}/tests/install/consumer)
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

# expect(NAME REGEX COMMAND...): runs COMMAND, which must succeed and print REGEX.
function(expect name regex)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "${regex}")
    message(FATAL_ERROR "${name}: expected '${regex}' and success, got (${rc}):\n${out}")
  endif()
  message(STATUS "${name}: ${out}")
endfunction()

# The libraries as a distribution ships them: real file, SONAME link, development link.
file(GLOB_RECURSE shared_lib LIST_DIRECTORIES false ${prefix}/*/libmempool.so.${VERSION})
if(NOT shared_lib)
  message(FATAL_ERROR "libmempool.so.${VERSION} was not installed under ${prefix}")
endif()
get_filename_component(libdir ${shared_lib} DIRECTORY)
string(REGEX MATCH "^[0-9]+" major ${VERSION})
foreach(lib mempool mempool-malloc)
  foreach(link_target IN ITEMS "lib${lib}.so:lib${lib}.so.${major}"
                               "lib${lib}.so.${major}:lib${lib}.so.${VERSION}")
    string(REPLACE ":" ";" pair ${link_target})
    list(GET pair 0 link)
    list(GET pair 1 target)
    file(READ_SYMLINK ${libdir}/${link} points_to)
    if(NOT points_to STREQUAL target)
      message(FATAL_ERROR "${libdir}/${link} points to '${points_to}', not ${target}")
    endif()
  endforeach()
  expect("SONAME of lib${lib}" "SONAME +lib${lib}\\.so\\.${major}\n"
         ${OBJDUMP} -p ${libdir}/lib${lib}.so.${VERSION})
endforeach()
# libmempool.so exports the API, not malloc: only libmempool-malloc replaces it.
execute_process(COMMAND ${NM} -D --defined-only ${shared_lib} OUTPUT_VARIABLE exports)
if(exports MATCHES " (malloc|free|_Znwm|_ZdlPv)\n" OR NOT exports MATCHES " mp_malloc\n"
   OR exports MATCHES "PageHeap|CentralCache")
  message(FATAL_ERROR "libmempool.so exports the wrong symbols:\n${exports}")
endif()

# libmempool.so.0 can be loaded late, as plugins and language bindings load it: its
# initial-exec TLS block fits in glibc's surplus static TLS (docs/architecture.md,
# "Packaging"). (An instrumented library needs the sanitizer runtime loaded first,
# which python3 does not do.)
if(NOT SANITIZERS)
  # One statement a line: a ';' would split the argument (a CMake list).
  expect("dlopen of libmempool.so.${major}" "^mp_malloc ok\n" python3 -c "import ctypes
l = ctypes.CDLL('${libdir}/libmempool.so.${major}')
l.mp_malloc.restype = ctypes.c_void_p
p = l.mp_malloc(100)
l.mp_free(ctypes.c_void_p(p))
print('mp_malloc', 'ok' if p else 'failed')")
endif()

# find_package: mempool::mempool is the shared library.
run(${CMAKE_COMMAND} -S ${consumer} -B ${WORK_DIR}/build -G ${GENERATOR}
    -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_CXX_FLAGS=${flags}
    -DWITH_OVERRIDE=${with_override})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
expect("cmake consumer" "heap 1 malloc-is-mempool 0" ${WORK_DIR}/build/consumer)
expect("cmake consumer links libmempool.so.0" "NEEDED +libmempool\\.so\\.${major}\n"
       ${OBJDUMP} -p ${WORK_DIR}/build/consumer)
# find_package(mempool COMPONENTS static): libmempool.a, no libmempool.so.0.
run(${CMAKE_COMMAND} -S ${consumer} -B ${WORK_DIR}/build-static -G ${GENERATOR}
    -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_CXX_FLAGS=${flags}
    -DWITH_OVERRIDE=OFF -DMEMPOOL_COMPONENTS=static)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build-static)
expect("static consumer" "heap 1 malloc-is-mempool 0" ${WORK_DIR}/build-static/consumer)
execute_process(COMMAND ${OBJDUMP} -p ${WORK_DIR}/build-static/consumer OUTPUT_VARIABLE needed)
if(needed MATCHES "libmempool")
  message(FATAL_ERROR "the static consumer needs a mempool library:\n${needed}")
endif()

# pkg-config, exactly as a Makefile would call it.
set(pc "export PKG_CONFIG_PATH=${libdir}/pkgconfig")
set(run_env ${CMAKE_COMMAND} -E env LD_LIBRARY_PATH=${libdir})
run(sh -c "${pc} && ${CXX} -std=c++20 ${flags} ${consumer}/main.cpp \
$(pkg-config --cflags --libs mempool) -o ${WORK_DIR}/pc_consumer")
expect("pkg-config consumer" "heap 1 malloc-is-mempool 0" ${run_env} ${WORK_DIR}/pc_consumer)
if(NOT with_override)
  return()
endif()
run(sh -c "${pc} && ${CXX} -std=c++20 ${consumer}/override_main.cpp \
$(pkg-config --cflags --libs mempool-malloc) -o ${WORK_DIR}/pc_override")
expect("pkg-config mempool-malloc" "active as malloc and operator new.*override 1"
       ${run_env} MEMPOOL_VERBOSE=1 ${WORK_DIR}/pc_override)

run(${WORK_DIR}/build/override_consumer)
# The installed preload library takes over an unchanged program.
expect("consumer under LD_PRELOAD" "active as malloc and operator new.*malloc-is-mempool 1"
       ${CMAKE_COMMAND} -E env MEMPOOL_VERBOSE=1 LD_PRELOAD=${libdir}/libmempool-malloc.so
       ${WORK_DIR}/build/consumer)
# The hardened drop-in, installed beside it where it is built (HARDENED: not under a
# sanitizer, nor in the checked build).
if(HARDENED)
  expect("SONAME of libmempool-malloc-hardened"
         "SONAME +libmempool-malloc-hardened\\.so\\.${major}\n"
         ${OBJDUMP} -p ${libdir}/libmempool-malloc-hardened.so.${VERSION})
  expect("consumer under the hardened LD_PRELOAD"
         "active as malloc and operator new in this process \\(hardened\\).*malloc-is-mempool 1"
         ${CMAKE_COMMAND} -E env MEMPOOL_VERBOSE=1
         LD_PRELOAD=${libdir}/libmempool-malloc-hardened.so.${major} ${WORK_DIR}/build/consumer)
endif()
