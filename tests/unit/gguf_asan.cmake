# gguf_asan.cmake — test_gguf again under ASan+UBSan, so the corrupt-file table and the
# truncation/mutation loops prove "errors, not crashes or over-reads" in every normal
# test run (not only in -DCMAKE_BUILD_TYPE=Asan builds).
inferd_add_asan_test(test_gguf_asan
  ${CMAKE_SOURCE_DIR}/tests/unit/test_gguf.c ${CMAKE_SOURCE_DIR}/src/model/gguf.c
  ${CMAKE_SOURCE_DIR}/src/model/gguf_write.c
  ${CMAKE_SOURCE_DIR}/src/model/ggml_types.c ${CMAKE_SOURCE_DIR}/src/util/common.c)
