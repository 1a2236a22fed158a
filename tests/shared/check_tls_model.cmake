# cmake -DOBJDUMP=... -DREADELF=... -DLIBRARIES="lib1;lib2" -DMAX_TLS_BYTES=N -P check_tls_model.cmake
#
# Every shared library of mempool reaches its thread-locals with initial-exec TLS
# (MEMPOOL_TLS_MODEL, include/mempool/detail/platform.hpp): no call to __tls_get_addr
# anywhere in its code, no dynamic-TLS relocation, the STATIC_TLS flag set, and a
# static TLS block small enough for dlopen() to find room for it in glibc's surplus
# (docs/architecture.md, "Packaging").
include(${CMAKE_CURRENT_LIST_DIR}/read_tool.cmake)
foreach(lib IN LISTS LIBRARIES)
  read_tool(code ${OBJDUMP} -d --no-show-raw-insn ${lib})
  # The functions that call it: "<name>:" headers followed by a line naming it.
  if(code MATCHES "__tls_get_addr")
    set(callers "")
    string(REPLACE "\n" ";" lines "${code}")
    set(function "?")
    foreach(line IN LISTS lines)
      if(line MATCHES "^[0-9a-f]+ <(.*)>:$")
        set(function "${CMAKE_MATCH_1}")
      elseif(line MATCHES "__tls_get_addr" AND NOT function MATCHES "@plt$")
        list(APPEND callers "${function}")
      endif()
    endforeach()
    list(REMOVE_DUPLICATES callers)
    list(JOIN callers "\n  " callers)
    message(FATAL_ERROR "${lib} calls __tls_get_addr (global- or local-dynamic TLS; "
      "mark the thread_local MEMPOOL_TLS_MODEL) in:\n  ${callers}")
  endif()

  execute_process(COMMAND ${READELF} -rW ${lib} OUTPUT_VARIABLE relocations)
  if(relocations MATCHES "R_X86_64_(DTPMOD64|DTPOFF64|TLSDESC)|R_AARCH64_TLS_(DTPMOD|DTPREL)|R_AARCH64_TLSDESC")
    message(FATAL_ERROR "${lib} has dynamic-TLS relocations:\n${relocations}")
  endif()

  execute_process(COMMAND ${READELF} -lW ${lib} OUTPUT_VARIABLE headers)
  if(headers MATCHES "\n +TLS +0x[0-9a-f]+ 0x[0-9a-f]+ 0x[0-9a-f]+ 0x[0-9a-f]+ (0x[0-9a-f]+)")
    math(EXPR tls_bytes "${CMAKE_MATCH_1}")
    execute_process(COMMAND ${READELF} -dW ${lib} OUTPUT_VARIABLE dynamic)
    if(NOT dynamic MATCHES "\\(FLAGS\\)[^\n]*STATIC_TLS")
      message(FATAL_ERROR "${lib} has TLS but not the STATIC_TLS flag:\n${dynamic}")
    endif()
    if(tls_bytes GREATER MAX_TLS_BYTES)
      message(FATAL_ERROR "${lib}: its static TLS block is ${tls_bytes} bytes, over "
        "${MAX_TLS_BYTES}: dlopen() of it may no longer find room in glibc's surplus "
        "(docs/architecture.md, \"Packaging\")")
    endif()
    message(STATUS "${lib}: initial-exec TLS, static TLS block ${tls_bytes} bytes")
  else()
    message(STATUS "${lib}: no TLS")
  endif()
endforeach()
