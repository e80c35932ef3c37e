# chat_escape_asan.cmake — test_chat_escape again under ASan+UBSan (leak checks on): the
# escaping, unescaping and mapped tokenization on every shared template and vocabulary,
# so "no over-read, no leak" is proven on every run, not only by the fuzzer.
file(GLOB _ce_tok CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/tokenizer/*.c ${CMAKE_SOURCE_DIR}/src/template/*.c
     ${CMAKE_SOURCE_DIR}/src/grammar/*.c)
list(FILTER _ce_tok EXCLUDE REGEX "/tok_model\\.c$") # model_load: needs the weights
set(_ce_srv ${CMAKE_SOURCE_DIR}/src/server)
inferd_add_asan_test(test_chat_escape_asan
  ${CMAKE_SOURCE_DIR}/tests/unit/test_chat_escape.c ${CMAKE_SOURCE_DIR}/tests/unit/stub_sampling.c
  ${_ce_srv}/chat.c ${_ce_srv}/chat_escape.c ${_ce_srv}/openai.c ${_ce_srv}/json.c ${_ce_srv}/tools.c ${_ce_tok}
  ${CMAKE_SOURCE_DIR}/src/model/gguf.c ${CMAKE_SOURCE_DIR}/src/model/ggml_types.c
  ${CMAKE_SOURCE_DIR}/src/util/buf.c ${CMAKE_SOURCE_DIR}/src/util/utf8.c
  ${CMAKE_SOURCE_DIR}/src/util/common.c ${CMAKE_SOURCE_DIR}/src/util/hash.c)
if(TARGET test_chat_escape_asan)
  target_include_directories(test_chat_escape_asan PRIVATE ${CMAKE_SOURCE_DIR}/include ${CJSON_INCLUDE_DIR})
  target_link_libraries(test_chat_escape_asan PRIVATE ${CJSON_LIBRARY})
endif()
