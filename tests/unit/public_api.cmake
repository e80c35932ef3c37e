# public_api.cmake — test_public_api: include/inferd.h stands alone. The test source
# (public_api_test.c, not a test_*.c so the generic rule does not build it) is compiled
# as strict C11 with ONLY include/ on its include path — an object library, so
# inferd_core's own include directories (src/, cJSON, libuv) never reach it — and then
# linked with the library. It tokenizes, detokenizes and renders the chat template of
# a real model from ../shared/models.
add_library(public_api_obj OBJECT ${CMAKE_CURRENT_LIST_DIR}/public_api_test.c)
set_target_properties(public_api_obj PROPERTIES C_STANDARD 11 C_EXTENSIONS OFF)
target_include_directories(public_api_obj PRIVATE ${CMAKE_SOURCE_DIR}/include)
target_compile_options(public_api_obj PRIVATE -Wpedantic)
target_compile_definitions(public_api_obj PRIVATE
  INFERD_SHARED_DIR="${INFERD_SHARED_DIR}" INFERD_BINARY="$<TARGET_FILE:inferd>")
add_executable(test_public_api $<TARGET_OBJECTS:public_api_obj>)
target_link_libraries(test_public_api PRIVATE inferd_core)
add_dependencies(test_public_api inferd)
add_test(NAME test_public_api COMMAND test_public_api WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(test_public_api PROPERTIES LABELS unit SKIP_RETURN_CODE 77)
