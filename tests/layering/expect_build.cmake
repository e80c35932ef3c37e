# expect_build.cmake — cmake -DBUILD_DIR=... -DTARGET=... -DEXPECT=fail|ok
# [-DPATTERN=regex] -P expect_build.cmake: builds one target of BUILD_DIR and passes
# when the build fails (EXPECT=fail, with PATTERN in its output) or succeeds (EXPECT=ok).
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD_DIR} --target ${TARGET}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(EXPECT STREQUAL "ok")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${TARGET} should build but did not (rc ${rc}):\n${out}")
  endif()
  message(STATUS "${TARGET} builds, as it should")
else()
  if(rc EQUAL 0)
    message(FATAL_ERROR "${TARGET} built, but the layering rules should have stopped it:\n${out}")
  endif()
  if(DEFINED PATTERN AND NOT out MATCHES "${PATTERN}")
    message(FATAL_ERROR "${TARGET} failed, but not with /${PATTERN}/ (a broken test?):\n${out}")
  endif()
  message(STATUS "${TARGET} fails to build, as it should:\n${out}")
endif()
