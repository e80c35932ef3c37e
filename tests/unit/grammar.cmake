# grammar.cmake — the fast mask against the brute-force oracle on Qwen2.5's 151,936-token
# vocabulary: 1,000 random reachable states of each of the three benchmark grammars
# (several minutes: its own test, label slow, so it runs beside the others); the plain
# test_grammar runs 50 of them. CI fetches the 0.5B model for it (scripts/test.sh).
set_tests_properties(test_grammar PROPERTIES ENVIRONMENT "INFERD_ORACLE_STATES=50")
add_test(NAME test_grammar_oracle_qwen COMMAND test_grammar test_oracle_qwen)
set_tests_properties(test_grammar_oracle_qwen PROPERTIES LABELS "slow" TIMEOUT 1800
                     ENVIRONMENT "INFERD_ORACLE_STATES=1000")
