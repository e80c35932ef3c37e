# Kernel tests: every tests/cuda/test_*.cu is built under the SIMT emulation and run by
# ctest in the three block orders (emu_<name>_{forward,reverse,random}); on a GPU host
# tests/gpu/run.sh builds the same sources natively (INFERD_GPU_TESTS=ON).
option(INFERD_GPU_TESTS "Build the tests/cuda kernel tests natively with nvcc" OFF)
file(GLOB INFERD_CUDA_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/cuda/test_*.cu)
if(INFERD_HAVE_EMU)
  foreach(src ${INFERD_CUDA_TESTS})
    get_filename_component(name ${src} NAME_WE)
    set(w ${CMAKE_BINARY_DIR}/emu_src/tests_${name}.cpp)
    if(NOT EXISTS ${w})
      file(WRITE ${w} "#include \"${src}\"\n")
    endif()
    set_source_files_properties(${w} PROPERTIES OBJECT_DEPENDS ${src})
    add_executable(emu_${name} ${w})
    target_link_libraries(emu_${name} PRIVATE ifd_cuda_emu inferd_core)
    target_compile_options(emu_${name} PRIVATE -Wall -Wextra -Werror -Wno-unused-function ${INFERD_EMU_FLAGS})
    target_compile_definitions(emu_${name} PRIVATE IFD_SIMT_EMU=1 INFERD_SHARED_DIR="${INFERD_SHARED_DIR}")
    foreach(order forward reverse random:7)
      string(REGEX REPLACE ":.*" "" oname ${order})
      add_test(NAME emu_${name}_${oname} COMMAND emu_${name} WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
      set_tests_properties(emu_${name}_${oname} PROPERTIES LABELS "kernels;emu"
        ENVIRONMENT "IFD_EMU_ORDER=${order}" SKIP_RETURN_CODE 77)
    endforeach()
  endforeach()
endif()
if(INFERD_HAVE_CUDA AND INFERD_GPU_TESTS)
  foreach(src ${INFERD_CUDA_TESTS})
    get_filename_component(name ${src} NAME_WE)
    add_executable(gpu_${name} ${src})
    target_link_libraries(gpu_${name} PRIVATE inferd_cuda inferd_core)
    target_compile_options(gpu_${name} PRIVATE -Werror=all-warnings -Xcompiler=-Wall,-Wextra,-Werror)
    target_compile_definitions(gpu_${name} PRIVATE INFERD_SHARED_DIR="${INFERD_SHARED_DIR}")
  endforeach()
endif()
# Every CUDA source warning-free for sm_80/86/89/90, every kernel within its register and
# spill budget (tests/cuda/ptxas_budgets.txt).
if(INFERD_HAVE_CUDA)
  find_package(Python3 COMPONENTS Interpreter)
  if(Python3_FOUND)
    add_test(NAME cuda_ptxas_budgets
      COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/cuda/check_ptxas.py ${CMAKE_SOURCE_DIR})
    set_tests_properties(cuda_ptxas_budgets PROPERTIES LABELS "kernels;cuda" SKIP_RETURN_CODE 77 TIMEOUT 1800)
  endif()
endif()
if(INFERD_HAVE_CUDA AND INFERD_GPU_TESTS)
  add_executable(gpu_membw ${CMAKE_SOURCE_DIR}/bench/gpu_membw.cu)
  target_link_libraries(gpu_membw PRIVATE inferd_cuda)
endif()
# All emulated kernel tests as one target (scripts/test.sh builds it in the ASan tree too).
if(INFERD_HAVE_EMU)
  add_custom_target(emu_tests)
  foreach(src ${INFERD_CUDA_TESTS})
    get_filename_component(name ${src} NAME_WE)
    add_dependencies(emu_tests emu_${name})
  endforeach()
endif()
# The engine equivalence tests (prefix cache on/off, preemption, chunk sizes, batch
# invariance, n > 1 forks, abort, penalties) again, on the CUDA backend under the
# emulation: one ctest per case so they spread over the cores (minutes of CPU in all).
if(INFERD_HAVE_EMU)
  foreach(case test_device_sampling test_n_fork test_n_fork_few_seats test_abort test_frequency_penalty
          test_prefix_caching_on_off test_preemption test_chunk_sizes test_batch_invariance)
    string(REPLACE "test_" "" short ${case})
    add_test(NAME test_engine_emu_${short} COMMAND test_engine ${case} WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
    set_tests_properties(test_engine_emu_${short} PROPERTIES LABELS "e2e;emu;slow"
      ENVIRONMENT "INFERD_TEST_DEVICE=emu" SKIP_RETURN_CODE 77 TIMEOUT 1200)
  endforeach()
  # speculative decoding: verification rows drawn by the device sampler, outputs as plain
  add_test(NAME test_engine_spec_emu_device_verify COMMAND test_engine_spec test_device_verify
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(test_engine_spec_emu_device_verify PROPERTIES LABELS "e2e;emu;slow"
    ENVIRONMENT "INFERD_TEST_DEVICE=emu" TIMEOUT 1200)
  # constrained decoding: masked rows drawn by the device sampler, as the host's
  add_test(NAME test_engine_grammar_emu COMMAND test_engine_grammar test_device_masks
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(test_engine_grammar_emu PROPERTIES LABELS "e2e;emu;slow"
    ENVIRONMENT "INFERD_TEST_DEVICE=emu" TIMEOUT 1200)
  # PD disaggregation: KV blocks out of and into the CUDA backend's pool (b_kv_rw)
  add_test(NAME test_pd_emu COMMAND test_pd test_identical_device WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(test_pd_emu PROPERTIES LABELS "e2e;emu"
    ENVIRONMENT "INFERD_TEST_DEVICE=emu" TIMEOUT 1200)
  # llama.cpp's greedy ids for every shared model (F32, Q8_0, Q4_0, Q4_K_M, the draft),
  # reproduced by the CUDA backend's kernels
  add_test(NAME test_reference_greedy_emu COMMAND test_reference_greedy WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(test_reference_greedy_emu PROPERTIES LABELS "e2e;emu"
    ENVIRONMENT "INFERD_TEST_DEVICE=emu" TIMEOUT 1200)
endif()
