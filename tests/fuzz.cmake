# libFuzzer targets. They need clang with -fsanitize=fuzzer (clang-15 comes with hipcc on the CI
# machine) while the rest of the build may use any compiler, so a fuzzer's sources are compiled
# here with that clang directly. Where no such clang exists every fuzzer is skipped, with a
# message.
find_program(MXABLATE_FUZZ_CXX NAMES clang++-15 clang++-14 clang++-16 clang++)
set(MXABLATE_FUZZ_OK FALSE)
if(MXABLATE_FUZZ_CXX)
  set(_probe_dir ${CMAKE_CURRENT_BINARY_DIR}/fuzz_probe)
  file(WRITE ${_probe_dir}/probe.cpp
       "#include <cstdint>\n#include <cstddef>\nextern \"C\" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n")
  execute_process(COMMAND ${MXABLATE_FUZZ_CXX} -std=c++20 -fsanitize=fuzzer,address
                          ${_probe_dir}/probe.cpp -o ${_probe_dir}/probe
                  RESULT_VARIABLE _probe_rc OUTPUT_QUIET ERROR_QUIET)
  if(_probe_rc EQUAL 0)
    set(MXABLATE_FUZZ_OK TRUE)
  endif()
endif()
if(MXABLATE_FUZZ_OK)
  message(STATUS "fuzzers: ${MXABLATE_FUZZ_CXX}")
else()
  message(STATUS "fuzzers: skipped (no clang++ with -fsanitize=fuzzer)")
endif()

# mxablate_add_fuzzer(NAME SOURCES … [INCLUDES dirs…] [DEFINES names…] [LINK args…]
#                     [DEPENDS targets…] [DICT file] SEEDS dirs… SECONDS n)
# Builds NAME with address and undefined-behaviour sanitizers (any undefined behaviour stops the
# run like a crash) and registers a CTest test running it for SECONDS from the seed directories.
# LINK may name already built (uninstrumented) libraries: the same libstdc++ ABI, and the code
# under test is what is instrumented.
function(mxablate_add_fuzzer name)
  if(NOT MXABLATE_FUZZ_OK)
    return()
  endif()
  cmake_parse_arguments(F "" "DICT;SECONDS" "SOURCES;INCLUDES;DEFINES;LINK;DEPENDS;SEEDS" ${ARGN})
  set(_sanitize -fsanitize=address,undefined -fno-sanitize-recover=undefined)
  set(_includes)
  foreach(_dir ${F_INCLUDES})
    list(APPEND _includes -I${_dir})
  endforeach()
  foreach(_define ${F_DEFINES})
    list(APPEND _includes -D${_define})
  endforeach()
  set(_objects)
  foreach(_src ${F_SOURCES})
    get_filename_component(_stem ${_src} NAME_WE)
    set(_obj ${CMAKE_CURRENT_BINARY_DIR}/${name}_obj/${_stem}.o)
    add_custom_command(
      OUTPUT ${_obj}
      COMMAND ${MXABLATE_FUZZ_CXX} -std=c++20 -O1 -g -fno-omit-frame-pointer
              -fsanitize=fuzzer-no-link ${_sanitize} ${_includes} -MD -MF ${_obj}.d
              -c ${_src} -o ${_obj}
      DEPENDS ${_src}
      DEPFILE ${_obj}.d
      COMMENT "fuzzer: compiling ${_stem}.cpp for ${name} with ${MXABLATE_FUZZ_CXX}"
      VERBATIM)
    list(APPEND _objects ${_obj})
  endforeach()
  set(_fuzzer ${CMAKE_RUNTIME_OUTPUT_DIRECTORY}/${name})
  add_custom_command(
    OUTPUT ${_fuzzer}
    COMMAND ${MXABLATE_FUZZ_CXX} -fsanitize=fuzzer ${_sanitize} ${_objects} ${F_LINK}
            -o ${_fuzzer}
    DEPENDS ${_objects} ${F_DEPENDS}
    COMMENT "fuzzer: linking ${name}"
    VERBATIM)
  add_custom_target(${name} ALL DEPENDS ${_fuzzer})
  add_test(NAME ${name}
           COMMAND ${PROJECT_SOURCE_DIR}/tests/support/run_fuzzer.sh ${_fuzzer}
                   ${CMAKE_CURRENT_BINARY_DIR}/${name}_work ${F_DICT} ${F_SECONDS} ${F_SEEDS})
  # No TIMEOUT of its own: the run bounds itself (-max_total_time), also when
  # MXABLATE_FUZZ_SECONDS asks for an hour by hand.
  set_tests_properties(${name} PROPERTIES LABELS fuzz)
endfunction()
