# Every tests/unit/test_*.c is one executable and one ctest of the same name; each
# such file may register more cases with add_test in tests/unit/*.cmake.
# Tests read ../shared/ relative to the source tree; a missing file fails the test.
set(INFERD_SHARED_DIR ${CMAKE_SOURCE_DIR}/../shared CACHE PATH "shared data directory")

file(GLOB INFERD_UNIT_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/unit/test_*.c)
foreach(src ${INFERD_UNIT_TESTS})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  target_link_libraries(${name} PRIVATE inferd_core)
  target_compile_definitions(${name} PRIVATE
    INFERD_SHARED_DIR="${INFERD_SHARED_DIR}" INFERD_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
    INFERD_BINARY="$<TARGET_FILE:inferd>")
  add_test(NAME ${name} COMMAND ${name} WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(${name} PROPERTIES LABELS unit SKIP_RETURN_CODE 77)
endforeach()

file(GLOB INFERD_TEST_CMAKE CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/*/*.cmake)
foreach(f ${INFERD_TEST_CMAKE})
  include(${f})
endforeach()
