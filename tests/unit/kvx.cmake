# test_kvx again with UCX held to its tcp transport: a GET is then emulated with active
# messages, which only works while the serving side's progress thread answers (the
# plain run lets UCX pick shared memory / CMA on this host). And once more under
# ASan+UBSan, for the endpoint description parsed from the network.
add_test(NAME test_kvx_ucx_tcp COMMAND test_kvx WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(test_kvx_ucx_tcp PROPERTIES LABELS unit ENVIRONMENT "UCX_TLS=tcp" SKIP_RETURN_CODE 77)
