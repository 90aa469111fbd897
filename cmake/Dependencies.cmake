# Finds every build dependency; a missing one stops configuration naming what to install.

include(FindPkgConfig)

function(gpuprof_require found what hint)
  if(NOT ${found})
    message(FATAL_ERROR "gpuprof: ${what} not found. ${hint}\n"
                        "Run scripts/install-deps.sh to install everything the build needs.")
  endif()
endfunction()

# CUDA toolkit: headers for CUPTI/driver/runtime types. The agent never links libcupti or
# libcuda; it loads CUPTI at run time (cupti/loader.c).
if(NOT DEFINED CUDAToolkit_ROOT AND NOT DEFINED ENV{CUDAToolkit_ROOT} AND EXISTS /usr/local/cuda)
  set(CUDAToolkit_ROOT /usr/local/cuda)
endif()
find_package(CUDAToolkit)
gpuprof_require(CUDAToolkit_FOUND "the CUDA toolkit (13.x)"
  "Install the CUDA 13 toolkit, or point CMake at it with -DCUDAToolkit_ROOT=/path/to/cuda (or the CUDAToolkit_ROOT environment variable).")
if(CUDAToolkit_VERSION_MAJOR LESS 13)
  message(FATAL_ERROR "gpuprof: CUDA toolkit ${CUDAToolkit_VERSION} found at ${CUDAToolkit_BIN_DIR}; "
                      "this build needs CUDA 13 (its CUPTI record layouts). Set CUDAToolkit_ROOT to a CUDA 13 toolkit.")
endif()
find_path(GPUPROF_CUPTI_INCLUDE_DIR cupti.h
  HINTS ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT}/extras/CUPTI/include)
gpuprof_require(GPUPROF_CUPTI_INCLUDE_DIR "CUPTI headers (cupti.h)"
  "They ship with the CUDA toolkit; set CUDAToolkit_ROOT to a toolkit that has them.")
find_library(GPUPROF_CUPTI_LIBRARY NAMES libcupti.so.13 cupti
  HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/extras/CUPTI/lib64)
gpuprof_require(GPUPROF_CUPTI_LIBRARY "libcupti.so.13"
  "It ships with the CUDA toolkit; set CUDAToolkit_ROOT to a toolkit that has it.")
get_filename_component(GPUPROF_CUPTI_LIBDIR ${GPUPROF_CUPTI_LIBRARY} DIRECTORY)

pkg_check_modules(LIBUNWIND libunwind)
gpuprof_require(LIBUNWIND_FOUND "libunwind" "Install the Debian package libunwind-dev.")

pkg_check_modules(PROTOBUFC libprotobuf-c)
gpuprof_require(PROTOBUFC_FOUND "protobuf-c" "Install the Debian package libprotobuf-c-dev.")
find_program(PROTOC_C NAMES protoc-c protoc-gen-c)
gpuprof_require(PROTOC_C "protoc-c" "Install the Debian package protobuf-c-compiler.")

find_package(CURL)
gpuprof_require(CURL_FOUND "libcurl" "Install the Debian package libcurl4-openssl-dev.")

find_package(ZLIB)
gpuprof_require(ZLIB_FOUND "zlib" "Install the Debian package zlib1g-dev.")

pkg_check_modules(LIBELF libelf)
gpuprof_require(LIBELF_FOUND "libelf" "Install the Debian package libelf-dev.")

find_package(Threads REQUIRED)

# nvcc is optional: without it the CUDA samples are skipped.
include(CheckLanguage)
check_language(CUDA)
