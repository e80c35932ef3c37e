# Benchmark executables (figures, not tests): bench_kernels (CPU matmul/attention
# GB/s and GFLOP/s) and membw (read bandwidth, the decode roofline). Built with
# everything else; run by hand: build/bench_kernels, build/membw.
add_executable(bench_kernels ${CMAKE_SOURCE_DIR}/bench/bench_kernels.c)
target_link_libraries(bench_kernels PRIVATE inferd_core)
add_executable(membw ${CMAKE_SOURCE_DIR}/bench/membw.c)
target_link_libraries(membw PRIVATE inferd_core)
add_executable(grammar_bench ${CMAKE_SOURCE_DIR}/bench/grammar_bench.c)
target_link_libraries(grammar_bench PRIVATE inferd_core)
add_executable(kvx_bench ${CMAKE_SOURCE_DIR}/bench/kvx_bench.c)
target_link_libraries(kvx_bench PRIVATE ifd_kvx)
