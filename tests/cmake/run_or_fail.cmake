# For cmake -P test scripts: run(COMMAND...) runs a command and stops the script
# with its output when it fails; otherwise shows the command and its output.
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}")
  endif()
  list(JOIN ARGN " " command)
  message(STATUS "${command}\n${out}")
endfunction()
