# cuda.cmake — the CUDA sources built twice: for a GPU with nvcc (inferd_cuda, when a
# CUDA compiler is present) and for the SIMT emulation with the host C++ compiler
# (ifd_cuda_emu, whenever CUDA's headers are: CI runs every kernel through it).
#
# Kernel sources: kernels/*.cu (one op family per file; simt.h and devrt.h, the portable
# layer) and src/backend/cuda/*.cu (the backend's host glue). kernels/devrt_cuda.cu is the
# GPU's runtime; kernels/emu/*.cpp the emulation's.
file(GLOB INFERD_CU_SRC CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/kernels/*.cu
  ${CMAKE_SOURCE_DIR}/src/backend/cuda/*.cu)
set(INFERD_CU_EMU_SRC ${INFERD_CU_SRC})
list(FILTER INFERD_CU_EMU_SRC EXCLUDE REGEX "/devrt_cuda\\.cu$")

if(INFERD_HAVE_CUDA)
  add_library(inferd_cuda STATIC ${INFERD_CU_SRC})
  target_include_directories(inferd_cuda PUBLIC ${CMAKE_SOURCE_DIR}/kernels ${CMAKE_SOURCE_DIR}/src)
  target_compile_options(inferd_cuda PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings -Xcompiler=-Wall,-Wextra,-Werror>)
  target_link_libraries(inferd_cuda PUBLIC CUDA::cudart CUDA::cublas ifd_model ifd_util)
  target_compile_definitions(inferd_cuda PRIVATE IFD_ROOM_BACKEND=1)
  target_compile_definitions(ifd_backend PUBLIC INFERD_HAVE_CUDA=1)
  target_link_libraries(ifd_backend PUBLIC inferd_cuda)
  target_link_libraries(inferd_cuda PUBLIC ifd_backend)
endif()

# The emulation needs only CUDA's host headers (cuda_fp16.h, vector_types.h).
set(INFERD_HAVE_EMU OFF)
if(NOT CUDAToolkit_FOUND)
  find_package(CUDAToolkit QUIET)
endif()
if(CUDAToolkit_FOUND AND NOT INFERD_EMU STREQUAL "OFF")
  set(INFERD_HAVE_EMU ON)
  enable_language(CXX)
  set(CMAKE_CXX_STANDARD 17)
  set(CMAKE_CXX_STANDARD_REQUIRED ON)
  # Each .cu is compiled as C++ through a one-line wrapper (a source's language is a
  # property of the file, and the GPU build compiles the same file as CUDA).
  set(_emu_srcs)
  foreach(f ${INFERD_CU_EMU_SRC})
    file(RELATIVE_PATH rel ${CMAKE_SOURCE_DIR} ${f})
    string(REPLACE "/" "_" stem ${rel})
    set(w ${CMAKE_BINARY_DIR}/emu_src/${stem}.cpp)
    if(NOT EXISTS ${w})
      file(WRITE ${w} "#include \"${f}\"\n")
    endif()
    list(APPEND _emu_srcs ${w})
    set_source_files_properties(${w} PROPERTIES OBJECT_DEPENDS ${f})
  endforeach()
  add_library(ifd_cuda_emu STATIC ${_emu_srcs}
    ${CMAKE_SOURCE_DIR}/kernels/emu/emu.cpp
    ${CMAKE_SOURCE_DIR}/kernels/emu/devrt_emu.cpp)
  target_include_directories(ifd_cuda_emu PUBLIC ${CMAKE_SOURCE_DIR}/kernels ${CMAKE_SOURCE_DIR}/src)
  target_include_directories(ifd_cuda_emu SYSTEM PUBLIC ${CUDAToolkit_INCLUDE_DIRS})
  # IFD_SIMT_EMU stays PRIVATE (the emulated tests add it themselves): ifd_backend links
  # this library and inferd_cuda links ifd_backend, so a PUBLIC one would compile the GPU
  # build's kernels (and gpu_test_*) in emulation mode.
  target_compile_definitions(ifd_cuda_emu PRIVATE IFD_SIMT_EMU=1 IFD_ROOM_BACKEND=1)
  target_compile_options(ifd_cuda_emu PRIVATE -Wall -Wextra -Werror -Wno-unused-function)
  # Emulated kernels call fmaf for every multiply-add: a libm call without FMA code
  # generation. The emulation runs where it is built (tests), so use the host's FMA —
  # for the emulated sources only (INFERD_EMU_FLAGS, also given to the emu tests): the
  # CPU backend's own files must not change their code generation.
  set(INFERD_EMU_FLAGS)
  if(EXISTS /proc/cpuinfo)
    file(STRINGS /proc/cpuinfo _cpu_flags REGEX "^flags")
    list(GET _cpu_flags 0 _cpu_flags0)
    if(_cpu_flags0 MATCHES "[ \t]fma[ \t]")
      set(INFERD_EMU_FLAGS -mfma -ffp-contract=off)
    endif()
  endif()
  target_compile_options(ifd_cuda_emu PRIVATE ${INFERD_EMU_FLAGS})
  target_link_libraries(ifd_cuda_emu PUBLIC ifd_model ifd_util Threads::Threads)
  target_compile_definitions(ifd_backend PUBLIC INFERD_HAVE_EMU=1)
  target_link_libraries(ifd_backend PUBLIC ifd_cuda_emu)
  # the backend glue (cuda_backend.cu) walks forward.c: a cycle CMake links twice
  target_link_libraries(ifd_cuda_emu PUBLIC ifd_backend)
endif()
if(INFERD_HAVE_CUDA OR INFERD_HAVE_EMU)
  target_compile_definitions(ifd_backend PUBLIC INFERD_HAVE_CUDA_BACKEND=1)
endif()
message(STATUS "inferd: SIMT emulation of the CUDA kernels ${INFERD_HAVE_EMU}")
