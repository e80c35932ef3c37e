# server_asan.cmake — test_server_units again under ASan+UBSan, so the request parser
# (json.c, openai.c) proves on every run that hostile bodies, the int64 edges of the
# integer fields and the kept number literals give errors, not undefined behaviour or
# leaks. The server sources are included by the test itself (instrumented); the rest
# (tokenizer, templates) comes uninstrumented from inferd_core.
inferd_add_asan_test(test_server_units_asan ${CMAKE_SOURCE_DIR}/tests/unit/test_server_units.c)
if(TARGET test_server_units_asan)
  target_link_libraries(test_server_units_asan PRIVATE inferd_core)
endif()
