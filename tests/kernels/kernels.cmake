# CUDA kernel tests: built only with the CUDA backend; they exit 77 (skip) when no
# device is present, so the same tests run unchanged on a GPU host.
if(INFERD_HAVE_CUDA)
  add_executable(test_cuda_vec_add ${CMAKE_SOURCE_DIR}/tests/kernels/test_cuda_vec_add.c)
  target_link_libraries(test_cuda_vec_add PRIVATE inferd_core)
  add_test(NAME test_cuda_vec_add COMMAND test_cuda_vec_add)
  set_tests_properties(test_cuda_vec_add PROPERTIES LABELS "kernels;cuda" SKIP_RETURN_CODE 77)
endif()
