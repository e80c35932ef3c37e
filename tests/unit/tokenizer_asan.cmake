# tokenizer_asan.cmake — test_tokenizer again, built with ASan+UBSan, so the random-bytes
# loops and the hostile in-memory vocabularies prove "no crash, no over-read" on every
# normal test run. Skipped, with a message, where the compiler cannot build and link
# -fsanitize=address,undefined, and in TSan builds.
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
  set(_tok ${CMAKE_SOURCE_DIR}/src/tokenizer)
  add_executable(test_tokenizer_asan
    ${CMAKE_SOURCE_DIR}/tests/unit/test_tokenizer.c
    ${_tok}/tokenizer.c ${_tok}/tokenizer_decode.c ${_tok}/tokenizer_special.c ${_tok}/spm.c
    ${_tok}/bpe.c ${_tok}/pretok.c ${_tok}/strmap.c ${_tok}/mheap.c ${_tok}/unicode.c
    ${_tok}/unicode_data.c
    ${CMAKE_SOURCE_DIR}/src/model/gguf.c ${CMAKE_SOURCE_DIR}/src/model/ggml_types.c
    ${CMAKE_SOURCE_DIR}/src/util/common.c)
  target_include_directories(test_tokenizer_asan PRIVATE ${CMAKE_SOURCE_DIR}/src)
  target_compile_definitions(test_tokenizer_asan PRIVATE INFERD_SHARED_DIR="${INFERD_SHARED_DIR}")
  target_compile_options(test_tokenizer_asan PRIVATE ${_san} -O1 -g -fno-omit-frame-pointer)
  target_link_options(test_tokenizer_asan PRIVATE ${_san})
  target_link_libraries(test_tokenizer_asan PRIVATE m)
  add_test(NAME test_tokenizer_asan COMMAND test_tokenizer_asan WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(test_tokenizer_asan PROPERTIES LABELS unit
    ENVIRONMENT "ASAN_OPTIONS=detect_leaks=1:abort_on_error=0;UBSAN_OPTIONS=print_stacktrace=1")
else()
  message(STATUS "inferd: test_tokenizer_asan not built (no -fsanitize=address,undefined here)")
endif()
