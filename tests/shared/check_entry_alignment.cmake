# cmake -DNM=... "-DLIBRARIES=lib1=drop-in;lib2=core;lib3=hardened" -P check_entry_alignment.cmake
#
# The entry points a program calls for every block start on a cache line
# (MEMPOOL_HOT_ENTRY, include/mempool/detail/platform.hpp): where one starts otherwise
# moves with any change to the code before it, and the pair's time with it
# (docs/performance.md, "Entry points on a cache line"). This fails when one of them is
# not 64-byte aligned: the attribute dropped, or a new hot entry written without it.
# Kinds: `drop-in` (malloc, free, realloc, malloc_usable_size, new and delete), `core`
# (libmempool's C and C++ APIs), `hardened` (a drop-in whose free goes out of line).
include(${CMAKE_CURRENT_LIST_DIR}/read_tool.cmake)
set(drop_in malloc free realloc malloc_usable_size _Znwm _Znam _ZdlPv _ZdaPv _ZdlPvm _ZdaPvm)
set(core mp_malloc mp_free mp_realloc mp_usable_size _ZN7mempool10deallocateEPv
  _ZN7mempool6detail17heap_try_allocateEm _ZN7mempool6detail21heap_deallocate_sizedEPvm
  _ZN7mempool6detail22heap_allocate_or_throwEm)
set(hardened ${drop_in} _ZN7mempool6detail13hardened_freeEPv
  _ZN7mempool6detail19hardened_free_sizedEPvm)
foreach(entry IN LISTS LIBRARIES)
  string(REGEX MATCH "^(.*)=(drop-in|core|hardened)$" matched "${entry}")
  if(NOT matched)
    message(FATAL_ERROR "LIBRARIES entry '${entry}': expected PATH=drop-in, core or hardened")
  endif()
  set(lib "${CMAKE_MATCH_1}")
  string(REPLACE "-" "_" kind "${CMAKE_MATCH_2}")
  # The symbol table (local symbols too: the hardened free is internal).
  read_tool(symbols ${NM} --defined-only ${lib})
  string(REPLACE "\n" ";" lines "${symbols}")
  set(misaligned "")
  foreach(function IN LISTS ${kind})
    set(address "")
    foreach(line IN LISTS lines)
      if(line MATCHES "^([0-9a-f]+) [Tt] ${function}$")
        set(address "${CMAKE_MATCH_1}")
        break()
      endif()
    endforeach()
    if(address STREQUAL "")
      message(FATAL_ERROR "${lib}: no function ${function} in its symbol table")
    endif()
    # 64-byte aligned: the last hex digit 0 and the one before it 0, 4, 8 or c.
    if(NOT address MATCHES "[048c]0$")
      list(APPEND misaligned "${function} at 0x${address}")
    endif()
  endforeach()
  list(LENGTH ${kind} checked)
  if(misaligned)
    list(JOIN misaligned ", " shown)
    message(FATAL_ERROR "${lib}: hot entry points not on a 64-byte line: ${shown}")
  endif()
  message(STATUS "${lib}: ${checked} hot entry points, each on a 64-byte line")
endforeach()
