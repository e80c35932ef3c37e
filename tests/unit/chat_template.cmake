# chat_template.cmake — runs tests/python/test_chat_templates.py under ctest: every shared
# chat template x every manifest conversation through `inferd chat-template`, compared
# byte for byte with the jinja2 renderings, plus the jinja2 cross-check of the C unit
# test's tables. Needs python3 with pytest (and jinja2 for the cross-check).
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME chat_templates_py
           COMMAND ${Python3_EXECUTABLE} -m pytest -q -p no:cacheprovider
                   ${CMAKE_SOURCE_DIR}/tests/python/test_chat_templates.py
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(chat_templates_py PROPERTIES LABELS "e2e" ENVIRONMENT "INFERD_BIN=$<TARGET_FILE:inferd>")
else()
  message(STATUS "inferd: python3 not found, chat_templates_py is not registered")
endif()
