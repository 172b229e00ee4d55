# cmake -DPROGRAM=... -DREGEX=... [-DARGS=a|b|c] [-DRC=n] [-DSTREAM=stderr] -P run_and_match.cmake
# Runs PROGRAM with ARGS ('|'-separated); passes when it exits with RC
# (default 0) AND its standard output (or standard error, with
# -DSTREAM=stderr) matches REGEX (PASS_REGULAR_EXPRESSION alone would ignore
# the exit status).
if(NOT DEFINED RC)
  set(RC 0)
endif()
string(REPLACE "|" ";" args "${ARGS}")
execute_process(COMMAND "${PROGRAM}" ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL RC)
  message(FATAL_ERROR "${PROGRAM} exited with ${rc}, not ${RC}")
endif()
if(STREAM STREQUAL "stderr")
  set(out "${err}")
endif()
if(NOT out MATCHES "${REGEX}")
  message(FATAL_ERROR "output of ${PROGRAM} does not match '${REGEX}'")
endif()
