# The engine equivalence cases of test_engine (prefix cache on/off, preemption, chunk
# sizes, batch invariance, forks) again at each KV cache dtype other than the CPU
# default (f16, which the plain test_engine run covers), on the CPU backend.
foreach(dt f32 bf16 int8 fp8)
  foreach(case test_prefix_caching_on_off test_preemption test_chunk_sizes test_batch_invariance
          test_n_fork)
    string(REPLACE "test_" "" short ${case})
    add_test(NAME test_engine_kv_${dt}_${short} COMMAND test_engine ${case}
             WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
    set_tests_properties(test_engine_kv_${dt}_${short} PROPERTIES LABELS "e2e"
      ENVIRONMENT "INFERD_TEST_DEVICE=cpu;INFERD_TEST_KV_DTYPE=${dt}" TIMEOUT 600)
  endforeach()
endforeach()
