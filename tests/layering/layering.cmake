# layering.cmake — proves the room rules of CMakeLists.txt / src/util/layering.h fire.
#   layering_bad_include: an engine-room source including a server header must fail to
#     compile with the layering message (layering_good_include: the same file in the
#     server room compiles).
#   layering_bad_kernel: an engine-room source including a CPU kernel header (the engine
#     never calls a kernel) must fail to compile (layering_good_kernel: in the backend
#     room it compiles).
#   layering_bad_link: an engine-room program calling a server function must fail to
#     link against ifd_engine (layering_good_link: against ifd_server it links).
#   layering_rooms: every include in src/ follows the arrows, every room header carries
#     its guard, and each room library links only rooms its arrows allow.
# The six build tests run `cmake --build` on this build tree, one at a time
# (RESOURCE_LOCK), on targets left out of the default build.
set(_ly ${CMAKE_SOURCE_DIR}/tests/layering)

add_library(layering_bad_include OBJECT EXCLUDE_FROM_ALL ${_ly}/bad_include.c)
target_compile_definitions(layering_bad_include PRIVATE IFD_ROOM_ENGINE=1)
target_link_libraries(layering_bad_include PRIVATE ifd_util)
add_library(layering_good_include OBJECT EXCLUDE_FROM_ALL ${_ly}/bad_include.c)
target_compile_definitions(layering_good_include PRIVATE IFD_ROOM_SERVER=1)
target_link_libraries(layering_good_include PRIVATE ifd_util)

add_library(layering_bad_kernel OBJECT EXCLUDE_FROM_ALL ${_ly}/bad_kernel_include.c)
target_compile_definitions(layering_bad_kernel PRIVATE IFD_ROOM_ENGINE=1)
target_link_libraries(layering_bad_kernel PRIVATE ifd_util)
add_library(layering_good_kernel OBJECT EXCLUDE_FROM_ALL ${_ly}/bad_kernel_include.c)
target_compile_definitions(layering_good_kernel PRIVATE IFD_ROOM_BACKEND=1)
target_link_libraries(layering_good_kernel PRIVATE ifd_util)

add_executable(layering_bad_link EXCLUDE_FROM_ALL ${_ly}/bad_link.c)
target_compile_definitions(layering_bad_link PRIVATE IFD_ROOM_ENGINE=1)
target_link_libraries(layering_bad_link PRIVATE ifd_engine)
add_executable(layering_good_link EXCLUDE_FROM_ALL ${_ly}/bad_link.c)
target_compile_definitions(layering_good_link PRIVATE IFD_ROOM_SERVER=1)
target_link_libraries(layering_good_link PRIVATE ifd_server)

function(_layering_build_test name target expect pattern)
  add_test(NAME ${name}
    COMMAND ${CMAKE_COMMAND} -DBUILD_DIR=${CMAKE_BINARY_DIR} -DTARGET=${target}
            -DEXPECT=${expect} "-DPATTERN=${pattern}" -P ${_ly}/expect_build.cmake)
  set_tests_properties(${name} PROPERTIES LABELS unit RESOURCE_LOCK inferd_build_tree TIMEOUT 300)
endfunction()
_layering_build_test(layering_bad_include layering_bad_include fail "layering: this room may not include a SERVER header")
_layering_build_test(layering_good_include layering_good_include ok "")
_layering_build_test(layering_bad_kernel layering_bad_kernel fail "layering: this room may not include a KERNELS header")
_layering_build_test(layering_good_kernel layering_good_kernel ok "")
_layering_build_test(layering_bad_link layering_bad_link fail "undefined.*httpd_reason")
_layering_build_test(layering_good_link layering_good_link ok "")

find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME layering_rooms COMMAND ${Python3_EXECUTABLE} ${_ly}/check_layering.py ${CMAKE_SOURCE_DIR})
  set_tests_properties(layering_rooms PROPERTIES LABELS unit)
else()
  message(STATUS "inferd: python3 not found, layering_rooms is not registered")
endif()
