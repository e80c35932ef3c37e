# Every tests/unit/test_*.c is one executable and one ctest of the same name; each
# such file may register more cases with add_test in tests/unit/*.cmake.
# Tests read ../shared/ relative to the source tree; a missing file fails the test.
set(INFERD_SHARED_DIR ${CMAKE_SOURCE_DIR}/../shared CACHE PATH "shared data directory")

#
# Each test links the rooms it uses (CMakeLists.txt), so a test cannot lean on a room
# it does not name; those not listed link inferd_core (all rooms).
set(_rooms_test_cpu_features ifd_util)
set(_rooms_test_threadpool ifd_util)
set(_rooms_test_gguf ifd_model)
set(_rooms_test_quant ifd_model)
set(_rooms_test_model_quant ifd_model)
set(_rooms_test_tokenizer ifd_tokenizer)
set(_rooms_test_chat_template ifd_template)
set(_rooms_test_grammar_json ifd_grammar ifd_tokenizer)
set(_rooms_test_ops_ref ifd_backend)
set(_rooms_test_kv_dtype ifd_backend)
set(_rooms_test_cpu_kernels ifd_backend ifd_tokenizer)
set(_rooms_test_fwd_ops ifd_backend ifd_tokenizer)
set(_rooms_test_backend_contract ifd_backend ifd_tokenizer)
set(_rooms_test_model_random ifd_backend ifd_tokenizer)
set(_rooms_test_awq ifd_backend ifd_tokenizer)
set(_rooms_test_scheduler ifd_engine)
set(_rooms_test_engine_prompt_logprobs ifd_engine)
set(_rooms_test_kv_cache ifd_engine)
set(_rooms_test_sampler ifd_engine)
set(_rooms_test_stop ifd_engine)
set(_rooms_test_spec ifd_engine)
set(_rooms_test_engine ifd_engine)
set(_rooms_test_engine_spec ifd_engine)
set(_rooms_test_engine_limits ifd_engine)
set(_rooms_test_engine_backend_fault ifd_engine)
set(_rooms_test_httpd_parse ifd_server)
set(_rooms_test_chat_escape ifd_server)
set(_rooms_test_rsp ifd_server)
set(_rooms_test_kvx ifd_kvx)
#
# Labels (README "Tests"): unit (fast, no model or a tiny one), kernels (a kernel or
# quant format against its reference), e2e (the real binary or a real model through
# the whole stack), slow (minutes); fuzz (tests/fuzz) is left out of plain runs with
# ctest -LE fuzz. Not listed: unit.
set(_label_test_ops_ref kernels)
set(_label_test_kv_dtype kernels)
set(_label_test_cpu_kernels kernels)
set(_label_test_quant kernels)
set(_label_test_fwd_ops kernels)
set(_label_test_awq kernels)
set(_label_test_engine_prompt_logprobs e2e)
set(_label_test_reference_greedy e2e)
set(_label_test_engine e2e)        # the shared model through engine + backend
set(_label_test_engine_spec e2e)   # speculative decoding on the shared pair
set(_label_test_engine_grammar e2e) # constrained decoding on the shared pair
set(_label_test_engine_limits e2e)
file(GLOB INFERD_UNIT_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/unit/test_*.c)
foreach(src ${INFERD_UNIT_TESTS})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  if(DEFINED _rooms_${name})
    target_link_libraries(${name} PRIVATE ${_rooms_${name}})
  else()
    target_link_libraries(${name} PRIVATE inferd_core)
  endif()
  set(_label unit)
  if(DEFINED _label_${name})
    set(_label ${_label_${name}})
  endif()
  target_compile_definitions(${name} PRIVATE
    INFERD_SHARED_DIR="${INFERD_SHARED_DIR}" INFERD_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
    INFERD_BINARY="$<TARGET_FILE:inferd>")
  add_test(NAME ${name} COMMAND ${name} WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(${name} PROPERTIES LABELS ${_label} SKIP_RETURN_CODE 77)
endforeach()

# quant_tool: inferd's reference quant kernels on raw files, for the gguf.quants
# cross-check (tests/python/test_quant_types.py finds it next to the inferd binary).
add_executable(quant_tool ${CMAKE_SOURCE_DIR}/tests/tools/quant_tool.c)
target_link_libraries(quant_tool PRIVATE ifd_model)
set_target_properties(quant_tool PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})

# inferd_add_asan_test(NAME SRC...): one more test executable built from SRC with
# ASan+UBSan (the checks of INFERD_UBSAN in CMakeLists.txt; leak checks on), so
# sanitizer-backed tests run in every normal ctest run. Skipped with a message where
# the compiler cannot link those sanitizers, and in TSan builds (the two do not mix).
include(CheckCSourceCompiles)
if(NOT INFERD_SANITIZE STREQUAL "tsan")
  set(CMAKE_REQUIRED_FLAGS "-fsanitize=address,${INFERD_UBSAN}")
  set(CMAKE_REQUIRED_LINK_OPTIONS "-fsanitize=address,${INFERD_UBSAN}")
  check_c_source_compiles("int main(void) { return 0; }" INFERD_CC_HAS_ASAN)
  unset(CMAKE_REQUIRED_FLAGS)
  unset(CMAKE_REQUIRED_LINK_OPTIONS)
endif()
function(inferd_add_asan_test name)
  if(NOT INFERD_CC_HAS_ASAN)
    message(STATUS "inferd: ${name} not built (no -fsanitize=address,${INFERD_UBSAN} here)")
    return()
  endif()
  set(_san -fsanitize=address,${INFERD_UBSAN} -fno-sanitize-recover=all)
  add_executable(${name} ${ARGN})
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/src)
  target_compile_definitions(${name} PRIVATE INFERD_SHARED_DIR="${INFERD_SHARED_DIR}")
  target_compile_options(${name} PRIVATE ${_san} -O1 -g -fno-omit-frame-pointer)
  target_link_options(${name} PRIVATE ${_san})
  target_link_libraries(${name} PRIVATE m)
  add_test(NAME ${name} COMMAND ${name} WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(${name} PROPERTIES LABELS unit
    ENVIRONMENT "ASAN_OPTIONS=detect_leaks=1:abort_on_error=0;UBSAN_OPTIONS=print_stacktrace=1")
endfunction()

file(GLOB INFERD_TEST_CMAKE CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/*/*.cmake)
# expect_build.cmake is a script run by ctest (cmake -P), not part of the configure
list(FILTER INFERD_TEST_CMAKE EXCLUDE REGEX "/expect_build\\.cmake$")
foreach(f ${INFERD_TEST_CMAKE})
  include(${f})
endforeach()
