# gguf_asan.cmake — test_gguf again, built with ASan+UBSan, so the corrupt-file table
# and the truncation/mutation loops prove "errors, not crashes or over-reads" in every
# normal test run (not only in -DCMAKE_BUILD_TYPE=Asan builds). Skipped, with a
# message, where the compiler cannot build and link -fsanitize=address,undefined, and
# in TSan builds (the two sanitizers do not mix).
include(CheckCSourceCompiles)

if(NOT INFERD_SANITIZE STREQUAL "tsan")
  set(CMAKE_REQUIRED_FLAGS "-fsanitize=address,undefined")
  set(CMAKE_REQUIRED_LINK_OPTIONS "-fsanitize=address,undefined")
  check_c_source_compiles("int main(void) { return 0; }" INFERD_CC_HAS_ASAN)
  unset(CMAKE_REQUIRED_FLAGS)
  unset(CMAKE_REQUIRED_LINK_OPTIONS)
endif()

if(INFERD_CC_HAS_ASAN)
  set(_san -fsanitize=address,undefined -fno-sanitize-recover=all)
  add_executable(test_gguf_asan
    ${CMAKE_SOURCE_DIR}/tests/unit/test_gguf.c ${CMAKE_SOURCE_DIR}/src/model/gguf.c
    ${CMAKE_SOURCE_DIR}/src/model/ggml_types.c ${CMAKE_SOURCE_DIR}/src/util/common.c)
  target_include_directories(test_gguf_asan PRIVATE ${CMAKE_SOURCE_DIR}/src)
  target_compile_definitions(test_gguf_asan PRIVATE INFERD_SHARED_DIR="${INFERD_SHARED_DIR}")
  target_compile_options(test_gguf_asan PRIVATE ${_san} -O1 -g -fno-omit-frame-pointer)
  target_link_options(test_gguf_asan PRIVATE ${_san})
  target_link_libraries(test_gguf_asan PRIVATE m)
  add_test(NAME test_gguf_asan COMMAND test_gguf_asan WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(test_gguf_asan PROPERTIES LABELS unit
    ENVIRONMENT "ASAN_OPTIONS=detect_leaks=1:abort_on_error=0;UBSAN_OPTIONS=print_stacktrace=1")
else()
  message(STATUS "inferd: test_gguf_asan not built (no -fsanitize=address,undefined here)")
endif()
