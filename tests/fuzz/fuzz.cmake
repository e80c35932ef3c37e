# fuzz.cmake — libFuzzer targets (clang only; skipped with a message elsewhere, or when
# clang lacks the libFuzzer runtime), under ASan and the UBSan checks of INFERD_UBSAN
# (CMakeLists.txt). fuzz_gguf_smoke and fuzz_openai_smoke (label fuzz) run each target
# for 20 s, seeded with ../shared/models and with tests/fuzz/openai_seeds.sh's
# requests; longer runs: tests/fuzz/run_fuzz.sh BUILD_DIR SECONDS [TARGET].
if(CMAKE_C_COMPILER_ID MATCHES "Clang" AND NOT INFERD_SANITIZE STREQUAL "tsan")
  include(CheckCSourceCompiles)
  set(CMAKE_REQUIRED_FLAGS "-fsanitize=fuzzer,address,${INFERD_UBSAN}")
  set(CMAKE_REQUIRED_LINK_OPTIONS "-fsanitize=fuzzer,address,${INFERD_UBSAN}")
  check_c_source_compiles([[
    #include <stddef.h>
    #include <stdint.h>
    int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }
  ]] INFERD_CC_HAS_LIBFUZZER)
  unset(CMAKE_REQUIRED_FLAGS)
  unset(CMAKE_REQUIRED_LINK_OPTIONS)
endif()

if(INFERD_CC_HAS_LIBFUZZER)
  set(_fuzz -fsanitize=fuzzer,address,${INFERD_UBSAN} -fno-sanitize-recover=all)
  add_executable(fuzz_gguf
    ${CMAKE_SOURCE_DIR}/tests/fuzz/fuzz_gguf.c ${CMAKE_SOURCE_DIR}/src/model/gguf.c
    ${CMAKE_SOURCE_DIR}/src/model/ggml_types.c ${CMAKE_SOURCE_DIR}/src/util/common.c)
  target_include_directories(fuzz_gguf PRIVATE ${CMAKE_SOURCE_DIR}/src)
  target_compile_options(fuzz_gguf PRIVATE ${_fuzz} -O1 -g -fno-omit-frame-pointer)
  target_link_options(fuzz_gguf PRIVATE ${_fuzz})

  # libFuzzer writes new inputs into its first corpus directory and only reads the rest.
  set(_corpus ${CMAKE_BINARY_DIR}/fuzz-smoke-corpus)
  file(MAKE_DIRECTORY ${_corpus})
  add_test(NAME fuzz_gguf_smoke
    COMMAND fuzz_gguf -max_total_time=20 -max_len=65536 -rss_limit_mb=2048
            -artifact_prefix=${CMAKE_BINARY_DIR}/fuzz_gguf- ${_corpus} ${INFERD_SHARED_DIR}/models)
  set_tests_properties(fuzz_gguf_smoke PROPERTIES LABELS fuzz TIMEOUT 120)

  # The request parser: json.c, openai.c, buf.c and utf8.c instrumented; the rest it calls
  # (inferd_sampling_default) from inferd_core.
  set(_srv ${CMAKE_SOURCE_DIR}/src/server)
  add_executable(fuzz_openai
    ${CMAKE_SOURCE_DIR}/tests/fuzz/fuzz_openai.c ${_srv}/json.c ${_srv}/openai.c
    ${CMAKE_SOURCE_DIR}/src/util/buf.c ${CMAKE_SOURCE_DIR}/src/util/utf8.c)
  target_include_directories(fuzz_openai PRIVATE ${CMAKE_SOURCE_DIR}/src)
  target_compile_options(fuzz_openai PRIVATE ${_fuzz} -O1 -g -fno-omit-frame-pointer)
  target_link_options(fuzz_openai PRIVATE ${_fuzz})
  target_link_libraries(fuzz_openai PRIVATE inferd_core)
  set(_ocorpus ${CMAKE_BINARY_DIR}/fuzz-smoke-corpus-openai)
  add_test(NAME fuzz_openai_seeds
    COMMAND bash ${CMAKE_SOURCE_DIR}/tests/fuzz/openai_seeds.sh ${_ocorpus}/seeds)
  set_tests_properties(fuzz_openai_seeds PROPERTIES LABELS fuzz FIXTURES_SETUP fuzz_openai_corpus)
  add_test(NAME fuzz_openai_smoke
    COMMAND fuzz_openai -max_total_time=20 -max_len=16384 -rss_limit_mb=2048 -timeout=10
            -dict=${CMAKE_SOURCE_DIR}/tests/fuzz/openai.dict
            -artifact_prefix=${CMAKE_BINARY_DIR}/fuzz_openai- ${_ocorpus}/new ${_ocorpus}/seeds)
  set_tests_properties(fuzz_openai_smoke PROPERTIES LABELS fuzz TIMEOUT 120
    FIXTURES_REQUIRED fuzz_openai_corpus)
  file(MAKE_DIRECTORY ${_ocorpus}/new)
else()
  message(STATUS "inferd: fuzz_gguf and fuzz_openai not built (need clang with libFuzzer)")
endif()

# ---- fuzz_grammar: JSON Schema / GBNF / regex text -> grammar -> masks (fast = brute
# force); run_fuzz.sh runs it.
if(INFERD_CC_HAS_LIBFUZZER)
  file(GLOB _fuzz_grammar_src CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/grammar/*.c)
  add_executable(fuzz_grammar ${CMAKE_SOURCE_DIR}/tests/fuzz/fuzz_grammar.c ${_fuzz_grammar_src}
    ${CMAKE_SOURCE_DIR}/src/util/utf8.c ${CMAKE_SOURCE_DIR}/src/util/common.c ${CMAKE_SOURCE_DIR}/src/util/hash.c
    ${CMAKE_SOURCE_DIR}/src/util/buf.c)
  target_include_directories(fuzz_grammar PRIVATE ${CMAKE_SOURCE_DIR}/src ${CJSON_INCLUDE_DIR})
  target_compile_options(fuzz_grammar PRIVATE ${_fuzz} -O1 -g -fno-omit-frame-pointer)
  target_link_options(fuzz_grammar PRIVATE ${_fuzz})
  target_link_libraries(fuzz_grammar PRIVATE ${CJSON_LIBRARY} m)
endif()

# ---- fuzz_chat: chat request -> chat_prompt (render + tokenize) on the shared templates
# and vocabularies; checks that no control id comes from request data. fuzz_chat_smoke
# (label fuzz) runs it for 20 s; run_fuzz.sh runs it too.
if(INFERD_CC_HAS_LIBFUZZER)
  file(GLOB _fuzz_chat_tok CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/tokenizer/*.c
    ${CMAKE_SOURCE_DIR}/src/template/*.c ${CMAKE_SOURCE_DIR}/src/grammar/*.c)
  list(FILTER _fuzz_chat_tok EXCLUDE REGEX "/tok_model\\.c$") # model_load: needs the weights
  add_executable(fuzz_chat
    ${CMAKE_SOURCE_DIR}/tests/fuzz/fuzz_chat.c ${CMAKE_SOURCE_DIR}/tests/unit/stub_sampling.c ${_fuzz_chat_tok}
    ${CMAKE_SOURCE_DIR}/src/server/chat.c ${CMAKE_SOURCE_DIR}/src/server/chat_escape.c
    ${CMAKE_SOURCE_DIR}/src/server/openai.c ${CMAKE_SOURCE_DIR}/src/server/json.c
    ${CMAKE_SOURCE_DIR}/src/server/tools.c
    ${CMAKE_SOURCE_DIR}/src/util/buf.c ${CMAKE_SOURCE_DIR}/src/util/utf8.c
    ${CMAKE_SOURCE_DIR}/src/model/gguf.c ${CMAKE_SOURCE_DIR}/src/model/ggml_types.c
    ${CMAKE_SOURCE_DIR}/src/util/common.c ${CMAKE_SOURCE_DIR}/src/util/hash.c)
  target_include_directories(fuzz_chat PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/include
    ${CJSON_INCLUDE_DIR})
  target_compile_definitions(fuzz_chat PRIVATE INFERD_SHARED_DIR="${INFERD_SHARED_DIR}")
  target_compile_options(fuzz_chat PRIVATE ${_fuzz} -O1 -g -fno-omit-frame-pointer)
  target_link_options(fuzz_chat PRIVATE ${_fuzz})
  target_link_libraries(fuzz_chat PRIVATE ${CJSON_LIBRARY} m)

  set(_chat_corpus ${CMAKE_BINARY_DIR}/fuzz-chat-smoke-corpus)
  file(MAKE_DIRECTORY ${_chat_corpus})
  add_test(NAME fuzz_chat_smoke
    COMMAND fuzz_chat -max_total_time=20 -max_len=4096 -rss_limit_mb=2048 -timeout=20
            -artifact_prefix=${CMAKE_BINARY_DIR}/fuzz_chat- ${_chat_corpus})
  set_tests_properties(fuzz_chat_smoke PROPERTIES LABELS fuzz TIMEOUT 180)
else()
  message(STATUS "inferd: fuzz_chat not built (needs clang with libFuzzer)")
endif()

# ---- fuzz_httpd: raw bytes over loopback to an in-process HTTP server (httpd.c) with a
# stub application; checks every connection is freed and every request ended once.
# fuzz_httpd_smoke (label fuzz) runs it for 20 s; run_fuzz.sh runs it too.
if(INFERD_CC_HAS_LIBFUZZER)
  add_executable(fuzz_httpd
    ${CMAKE_SOURCE_DIR}/tests/fuzz/fuzz_httpd.c ${CMAKE_SOURCE_DIR}/src/server/httpd.c
    ${CMAKE_SOURCE_DIR}/src/server/httpd_parse.c
    ${CMAKE_SOURCE_DIR}/src/util/buf.c ${CMAKE_SOURCE_DIR}/src/util/utf8.c ${CMAKE_SOURCE_DIR}/src/util/common.c)
  target_include_directories(fuzz_httpd PRIVATE ${CMAKE_SOURCE_DIR}/src)
  target_compile_options(fuzz_httpd PRIVATE ${_fuzz} -O1 -g -fno-omit-frame-pointer)
  target_link_options(fuzz_httpd PRIVATE ${_fuzz})
  target_link_libraries(fuzz_httpd PRIVATE Threads::Threads)
  set(_http_corpus ${CMAKE_BINARY_DIR}/fuzz-httpd-smoke-corpus)
  file(MAKE_DIRECTORY ${_http_corpus})
  add_test(NAME fuzz_httpd_smoke
    COMMAND fuzz_httpd -max_total_time=20 -max_len=4096 -rss_limit_mb=2048 -timeout=20
            -artifact_prefix=${CMAKE_BINARY_DIR}/fuzz_httpd- ${_http_corpus})
  set_tests_properties(fuzz_httpd_smoke PROPERTIES LABELS fuzz TIMEOUT 180)
else()
  message(STATUS "inferd: fuzz_httpd not built (needs clang with libFuzzer)")
endif()
