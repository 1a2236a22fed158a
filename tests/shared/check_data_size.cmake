# cmake -DREADELF=... -DLIBRARIES="lib1;lib2" -DMAX_DATA_BYTES=N -P check_data_size.cmake
#
# Each shared library of mempool keeps its initialised writable data (.data) small. An
# object with one non-zero member lands in .data whole: the page map's 1 MiB root did
# (src/heap/page_map.hpp), which made the library file 1 MiB larger and, once the root
# was read, 612 KiB of it resident in a program that allocated one block. Zero-filled
# objects belong in .bss, where a page that is only read is the kernel's zero page.
include(${CMAKE_CURRENT_LIST_DIR}/read_tool.cmake)
foreach(lib IN LISTS LIBRARIES)
  read_tool(sections ${READELF} -SW ${lib})
  # "[nn] .data PROGBITS address offset size ..."
  if(NOT sections MATCHES "\\] \\.data +PROGBITS +[0-9a-f]+ [0-9a-f]+ ([0-9a-f]+)")
    message(STATUS "${lib}: no .data")
    continue()
  endif()
  math(EXPR data_bytes "0x${CMAKE_MATCH_1}")
  if(data_bytes GREATER MAX_DATA_BYTES)
    message(FATAL_ERROR "${lib}: .data is ${data_bytes} bytes, over ${MAX_DATA_BYTES}: a large "
      "object with a non-zero initialiser? (tests/shared/check_data_size.cmake)")
  endif()
  message(STATUS "${lib}: .data ${data_bytes} bytes")
endforeach()
