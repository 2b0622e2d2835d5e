# NPU build (RUN_MODE=npu): the kernels through the CANN toolkit's ascendc_library, and libascend_pd_ops.so with the
# host tiling and the torch op registration (torch.ops.ascend_pd.*). Needs ASCEND_HOME_PATH (CANN set_env.sh),
# SOC_VERSION, and a Python with torch and torch_npu. Not run on this project's CI: see README.md.
if(NOT DEFINED SOC_VERSION)
    message(FATAL_ERROR "pass -DSOC_VERSION=... (Ascend910B1..Ascend910B4 for Atlas A2, Ascend910_93xx for Atlas A3)")
endif()
if(NOT DEFINED ENV{ASCEND_HOME_PATH})
    message(FATAL_ERROR "ASCEND_HOME_PATH is not set: source <CANN install>/set_env.sh first")
endif()
set(ASCEND_HOME_PATH $ENV{ASCEND_HOME_PATH})
set(ASCEND_CANN_PACKAGE_PATH ${ASCEND_HOME_PATH})

# Where the toolkit installs its kernel CMake modules: <arch>-linux/tikcpp/ascendc_kernel_cmake, linked from
# compiler/ and tools/ (asc-devkit scripts/package/asc-devkit/asc-devkit.xml); -DASCENDC_CMAKE_DIR=... overrides.
set(ASCENDC_CMAKE_CANDIDATES
    ${ASCENDC_CMAKE_DIR}
    ${ASCEND_HOME_PATH}/compiler/tikcpp/ascendc_kernel_cmake
    ${ASCEND_HOME_PATH}/tools/tikcpp/ascendc_kernel_cmake
    ${ASCEND_HOME_PATH}/${CMAKE_SYSTEM_PROCESSOR}-linux/tikcpp/ascendc_kernel_cmake
    ${ASCEND_HOME_PATH}/ascendc_devkit/tikcpp/samples/cmake)
foreach(candidate ${ASCENDC_CMAKE_CANDIDATES})
    if(EXISTS ${candidate}/ascendc.cmake)
        set(ASCENDC_KERNEL_CMAKE ${candidate})
        break()
    endif()
endforeach()
if(NOT ASCENDC_KERNEL_CMAKE)
    string(REPLACE ";" "\n  " searched "${ASCENDC_CMAKE_CANDIDATES}")
    message(FATAL_ERROR "ascendc.cmake not found; searched:\n  ${searched}\nIs the CANN toolkit installed?")
endif()
include(${ASCENDC_KERNEL_CMAKE}/ascendc.cmake)

ascendc_library(kv_kernels_npu SHARED ${KERNEL_SOURCES})
ascendc_include_directories(kv_kernels_npu PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/include)

find_package(Python3 REQUIRED COMPONENTS Interpreter)
execute_process(COMMAND ${Python3_EXECUTABLE} -c "import torch; print(torch.utils.cmake_prefix_path)"
                OUTPUT_VARIABLE TORCH_CMAKE_PREFIX OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND ${Python3_EXECUTABLE} -c "import os, torch_npu; print(os.path.dirname(torch_npu.__file__))"
                OUTPUT_VARIABLE TORCH_NPU_PATH OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
list(APPEND CMAKE_PREFIX_PATH ${TORCH_CMAKE_PREFIX})
find_package(Torch REQUIRED)

add_library(ascend_pd_ops SHARED npu/torch_binding.cpp ${HOST_SOURCES})
target_include_directories(ascend_pd_ops PRIVATE include host ${TORCH_INCLUDE_DIRS} ${TORCH_NPU_PATH}/include
                           ${ASCEND_HOME_PATH}/include)
target_link_directories(ascend_pd_ops PRIVATE ${TORCH_NPU_PATH}/lib ${ASCEND_HOME_PATH}/lib64)
target_link_libraries(ascend_pd_ops PRIVATE ${TORCH_LIBRARIES} torch_npu kv_kernels_npu ascendcl)
target_link_options(ascend_pd_ops PRIVATE "-Wl,-rpath,$ORIGIN")
