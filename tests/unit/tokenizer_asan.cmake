# tokenizer_asan.cmake — test_tokenizer again under ASan+UBSan, so the random-bytes loops
# and the hostile in-memory vocabularies prove "no crash, no over-read" on every run.
set(_tok ${CMAKE_SOURCE_DIR}/src/tokenizer)
inferd_add_asan_test(test_tokenizer_asan
  ${CMAKE_SOURCE_DIR}/tests/unit/test_tokenizer.c
  ${_tok}/tokenizer.c ${_tok}/tokenizer_decode.c ${_tok}/tokenizer_special.c ${_tok}/spm.c
  ${_tok}/bpe.c ${_tok}/pretok.c ${_tok}/strmap.c ${_tok}/mheap.c ${_tok}/unicode.c
  ${_tok}/unicode_data.c
  ${CMAKE_SOURCE_DIR}/src/model/gguf.c ${CMAKE_SOURCE_DIR}/src/model/ggml_types.c
  ${CMAKE_SOURCE_DIR}/src/util/common.c ${CMAKE_SOURCE_DIR}/src/util/utf8.c)
