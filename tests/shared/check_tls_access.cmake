# cmake -DOBJDUMP=... "-DLIBRARIES=lib1=prefix;lib2=prefix+fn" -P check_tls_access.cmake
#
# How the drop-ins' entry points reach the thread cache
# (include/mempool/detail/heap_thread_cache.hpp): with %fs: on the accesses themselves,
# the list heads' as %fs:(register) with the class already added in (ThreadCache::head),
# never %fs:(%rax,%rsi,8). A head addressed with the prefix and an index cost 3 ns a pair
# on an Intel Xeon (docs/performance.md, "On Intel"): this fails when a library's hit path
# reads a head as t.heads[c] again, or reaches no thread-local with the prefix at all
# (the compiler taking the cache's address whole, as at -O0).
#
# And each function's hit path (its code up to the first `ret`: the compiler lays the
# likely path out first) loads at most one GOT entry, the cache's offset: the hit path's
# accesses all go through it (ThreadCache::tls_offset), and a second load came back
# wherever the compiler did not merge two of them (the hardened library's key, the sized
# delete's two class lookups). `+fn` after the mode names more functions to read in that
# library (the hardened library's free is a jump to one).
include(${CMAKE_CURRENT_LIST_DIR}/read_tool.cmake)
set(common_functions malloc free _Znwm _ZdlPv _ZdlPvm)
foreach(entry IN LISTS LIBRARIES)
  string(REGEX MATCH "^(.*)=(prefix)((\\+[A-Za-z0-9_]+)*)$" matched "${entry}")
  if(NOT matched)
    message(FATAL_ERROR "LIBRARIES entry '${entry}': expected PATH=prefix, "
      "then +FUNCTION for each function more")
  endif()
  set(lib "${CMAKE_MATCH_1}")
  set(mode "${CMAKE_MATCH_2}")
  string(REPLACE "+" ";" extra "${CMAKE_MATCH_3}")
  set(functions ${common_functions} ${extra})
  list(JOIN functions ", " function_names)
  set(prefixed "")
  set(indexed_heads "")
  set(got_loads "")
  foreach(function IN LISTS functions)
    read_tool(code ${OBJDUMP} -d --no-show-raw-insn --disassemble=${function} ${lib})
    if(NOT code MATCHES "<${function}>:")
      message(FATAL_ERROR "${lib}: no function ${function} to read")
    endif()
    string(REPLACE "\n" ";" lines "${code}")
    set(in_hit_path TRUE)
    set(hit_path_got "")
    foreach(line IN LISTS lines)
      if(in_hit_path AND line MATCHES "<_GLOBAL_OFFSET_TABLE_")
        string(STRIP "${line}" shown_line)
        list(APPEND hit_path_got "${function}: ${shown_line}")
      endif()
      if(line MATCHES "\tret")
        set(in_hit_path FALSE)
      endif()
      # %fs:0x0 is the thread pointer itself and %fs:0x28 the stack protector's canary;
      # any other %fs: operand is an access to a thread-local.
      if(line MATCHES "%fs:" AND NOT line MATCHES "%fs:0x(0|28)(,|$)")
        string(STRIP "${line}" line)
        list(APPEND prefixed "${function}: ${line}")
        # An 8-byte-scaled index, with or without a base: the heads (the rooms are 4
        # bytes, scaled by 4).
        if(line MATCHES "%fs:[^ ]*\\(%?[a-z0-9]*,%r[a-z0-9]+,8\\)")
          list(APPEND indexed_heads "${function}: ${line}")
        endif()
      endif()
    endforeach()
    list(LENGTH hit_path_got n_got)
    if(n_got GREATER 1)
      list(APPEND got_loads ${hit_path_got})
    endif()
  endforeach()
  if(got_loads)
    list(JOIN got_loads "\n  " shown)
    message(FATAL_ERROR "${lib}: a hit path loads more than one GOT entry (the cache's "
      "offset again, ThreadCache::tls_offset):\n  ${shown}")
  endif()
  list(LENGTH prefixed n)
  list(JOIN prefixed "\n  " shown)
  if(n EQUAL 0)
    message(FATAL_ERROR "${lib} should put %fs: on its thread-cache accesses, but "
      "has none in ${function_names}")
  elseif(indexed_heads)
    list(JOIN indexed_heads "\n  " shown)
    message(FATAL_ERROR "${lib} addresses list heads with %fs: and an index register "
      "(ThreadCache::head addresses them as %fs:(register)):\n  ${shown}")
  endif()
  message(STATUS "${lib}: ${mode}, ${n} %fs:-prefixed accesses in ${function_names}")
endforeach()
