# cmake -DPROGRAM=... -DREGEX=... -P run_and_match.cmake
# Runs PROGRAM; passes when it exits with 0 AND its standard output matches
# REGEX (PASS_REGULAR_EXPRESSION alone would ignore the exit status).
execute_process(COMMAND "${PROGRAM}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${PROGRAM} exited with ${rc}")
endif()
if(NOT out MATCHES "${REGEX}")
  message(FATAL_ERROR "output of ${PROGRAM} does not match '${REGEX}'")
endif()
