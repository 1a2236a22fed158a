# read_tool(<var> <command> <args>...): runs a tool (objdump, readelf) and puts its
# standard output in <var>; a failure stops the script with the command and its message.
function(read_tool var)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    list(JOIN ARGN " " command)
    message(FATAL_ERROR "${command} failed: ${err}")
  endif()
  set(${var} "${out}" PARENT_SCOPE)
endfunction()
