# CMake helpers for tests that run programs under the shipped agent on the simulated GPU.

find_package(Python3 COMPONENTS Interpreter REQUIRED)

set(GPUPROF_E2E_RUNNER ${CMAKE_SOURCE_DIR}/tests/e2e/run_case.py)

# Sanitizer settings for everything a test starts. halt_on_error makes the first report fatal,
# the distinct exit codes (86 ASan, 87 UBSan, 88 TSan) keep a report from passing for the
# program's own status, and run_case.py also fails on any sanitizer banner in stderr.
# LeakSanitizer stays on: the agent's teardown is part of what is tested (lsan.supp lists the
# simulator's deliberate leaks, if any).
set(GPUPROF_TEST_SANITIZER_ENV)
if(GPUPROF_SANITIZE STREQUAL "address")
  list(APPEND GPUPROF_TEST_SANITIZER_ENV
    "ASAN_OPTIONS=set:halt_on_error=1:exitcode=86:detect_leaks=1:abort_on_error=0:strict_string_checks=1"
    "UBSAN_OPTIONS=set:halt_on_error=1:print_stacktrace=1:exitcode=87"
    "LSAN_OPTIONS=set:suppressions=${CMAKE_SOURCE_DIR}/tests/lib/lsan.supp:print_suppressions=0")
elseif(GPUPROF_SANITIZE STREQUAL "thread")
  list(APPEND GPUPROF_TEST_SANITIZER_ENV
    "TSAN_OPTIONS=set:halt_on_error=1:exitcode=88:second_deadlock_stack=1:suppressions=${CMAKE_SOURCE_DIR}/tests/lib/tsan.supp")
endif()

# gpuprof_add_e2e_test(NAME <name> COMMAND <cmd> [<arg>...]
#                      [ENVIRONMENT <VAR=value>...] [UNSET <VAR>...]
#                      [LABELS <label>...] [TIMEOUT <seconds>] [NEEDS <target>...])
#
# Adds a ctest test whose environment runs CUDA programs under the agent on the simulator:
#   LD_LIBRARY_PATH        the simulated libcuda/libcupti/libcudart first
#   CUDA_INJECTION64_PATH  the agent as built ($<TARGET_FILE:gpuprof>)
#   GPUPROF_SUMMARY_FILE   <build>/tests/e2e/out/<name>/summary.json
#   GPUPROF_OUTPUT_DIR     <build>/tests/e2e/out/<name>/output (nothing lands in /tmp/gpuprof)
#   GPUPROF_RUN_DIR        <build>/tests/e2e/out/<name>/run (control sockets)
#   E2E_WORKDIR            <build>/tests/e2e/out/<name> (the runner's scratch space)
# then the per-test ENVIRONMENT (which may override those) and UNSET. Labels: "e2e" plus LABELS.
# Skipped with a configure message while the agent or a NEEDS target does not exist yet.
function(gpuprof_add_e2e_test)
  cmake_parse_arguments(PARSE_ARGV 0 T "" "NAME;TIMEOUT" "COMMAND;ENVIRONMENT;UNSET;LABELS;NEEDS")
  if(NOT T_NAME OR NOT T_COMMAND)
    message(FATAL_ERROR "gpuprof_add_e2e_test: NAME and COMMAND are required")
  endif()
  foreach(tgt gpuprof ${T_NEEDS})
    if(NOT TARGET ${tgt})
      message(STATUS "gpuprof e2e: skipping test ${T_NAME}: target ${tgt} does not exist yet")
      return()
    endif()
  endforeach()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 60)
  endif()

  set(work ${CMAKE_BINARY_DIR}/tests/e2e/out/${T_NAME})
  set(env
    "LD_LIBRARY_PATH=path_list_prepend:${GPUPROF_FAKEGPU_LIBDIR}"
    "CUDA_INJECTION64_PATH=set:$<TARGET_FILE:gpuprof>"
    "GPUPROF_SUMMARY_FILE=set:${work}/summary.json"
    "GPUPROF_OUTPUT_DIR=set:${work}/output"
    "GPUPROF_RUN_DIR=set:${work}/run"
    "E2E_WORKDIR=set:${work}"
    # Tests must not depend on the developer's environment.
    "GPUPROF_MODE=unset:" "GPUPROF_LOG=unset:" "GPUPROF_WINDOW=unset:" "GPUPROF_STACKS=unset:"
    "GPUPROF_CAPTURE_ON_START=unset:" "GPUPROF_CUPTI_PATH=unset:" "GPUPROF_PYROSCOPE_URL=unset:"
    "FAKEGPU_DEVICES=unset:" "FAKEGPU_DEVICE_MEM_MIB=unset:" "FAKEGPU_KERNEL_NS=unset:" "FAKEGPU_CUPTI_VERSION=unset:"
    "FAKEGPU_CUPTI_SUBSCRIBER=unset:" "FAKEGPU_CUPTI_FAULT=unset:" "FAKEGPU_LOG=unset:"
    "FAKEGPU_NESTED=unset:" "NCCL_PROFILER_PLUGIN=unset:" "NCCL_DEBUG=unset:"
    ${GPUPROF_TEST_SANITIZER_ENV})
  foreach(kv ${T_ENVIRONMENT})
    if(NOT kv MATCHES "^([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
      message(FATAL_ERROR "gpuprof_add_e2e_test(${T_NAME}): ENVIRONMENT entry '${kv}' is not VAR=value")
    endif()
    list(APPEND env "${CMAKE_MATCH_1}=set:${CMAKE_MATCH_2}")
  endforeach()
  foreach(var ${T_UNSET})
    list(APPEND env "${var}=unset:")
  endforeach()

  add_test(NAME ${T_NAME} COMMAND ${T_COMMAND})
  set_tests_properties(${T_NAME} PROPERTIES
    ENVIRONMENT_MODIFICATION "${env}"
    LABELS "e2e;${T_LABELS}"
    TIMEOUT ${T_TIMEOUT})
endfunction()

# gpuprof_add_e2e_case(NAME <name> PROGRAM <target> [ARGS <arg>...] [CASE <case>]
#                      [ENVIRONMENT ...] [UNSET ...] [LABELS ...] [TIMEOUT <s>] [NEEDS ...])
#
# A gpuprof_add_e2e_test that runs tests/e2e/run_case.py: the program once without and once
# with the agent, then the checks of case <case> (default: <name>) in tests/e2e/cases.py.
function(gpuprof_add_e2e_case)
  cmake_parse_arguments(PARSE_ARGV 0 C "" "NAME;PROGRAM;CASE;TIMEOUT"
                        "ARGS;ENVIRONMENT;UNSET;LABELS;NEEDS")
  if(NOT C_CASE)
    set(C_CASE ${C_NAME})
  endif()
  if(NOT TARGET ${C_PROGRAM})
    message(STATUS "gpuprof e2e: skipping test ${C_NAME}: program ${C_PROGRAM} was not built")
    return()
  endif()
  set(timeout_arg)
  if(C_TIMEOUT)
    set(timeout_arg TIMEOUT ${C_TIMEOUT})
  endif()
  gpuprof_add_e2e_test(NAME ${C_NAME}
    COMMAND ${Python3_EXECUTABLE} ${GPUPROF_E2E_RUNNER} --case ${C_CASE}
            -- $<TARGET_FILE:${C_PROGRAM}> ${C_ARGS}
    ENVIRONMENT ${C_ENVIRONMENT}
    UNSET ${C_UNSET}
    LABELS ${C_LABELS}
    NEEDS ${C_PROGRAM} ${C_NEEDS}
    ${timeout_arg})
endfunction()
