# Runs one compile-check command and keeps what the compiler said (with nvcc's -Xptxas=-v, each
# kernel's registers and spills) in a log beside the object, for tests/gpu/kernel_spills_test.py.
#   cmake -DLOG=FILE -P compile_logged.cmake COMPILER ARG...
# What the compiler said besides ptxas's per-kernel report is printed, as an unwrapped compile
# would print it; a failed compile fails the command.
set(command)
set(collect OFF)
math(EXPR last "${CMAKE_ARGC} - 1")
foreach(i RANGE 0 ${last})
  if(collect)
    list(APPEND command "${CMAKE_ARGV${i}}")
  elseif(CMAKE_ARGV${i} MATCHES "compile_logged\\.cmake$")
    set(collect ON)
  endif()
endforeach()
if(NOT command OR NOT LOG)
  message(FATAL_ERROR "compile_logged.cmake: usage: cmake -DLOG=FILE -P compile_logged.cmake COMPILER ARG...")
endif()
execute_process(COMMAND ${command} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
file(WRITE "${LOG}" "${out}${err}")
string(REGEX REPLACE "ptxas info[^\n]*\n" "" said "${out}${err}")
string(REGEX REPLACE "    [0-9]+ bytes stack frame[^\n]*\n" "" said "${said}")
if(NOT said STREQUAL "")
  message("${said}")
endif()
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "compile failed (${rc})")
endif()
