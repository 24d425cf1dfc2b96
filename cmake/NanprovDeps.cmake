# Every dependency is found with find_package; nothing is vendored.
# Required everywhere: SQLite3, CLI11, nlohmann_json, Threads; GoogleTest for tests.
# LibTorch comes from the Python environment that runs the training (pass its
# torch.utils.cmake_prefix_path in CMAKE_PREFIX_PATH), so the C++ ABI matches.
# Optional: the CUDA Toolkit (with CUPTI and NVTX 3) and cuDNN. Parts that need them compile
# whenever they are found, even on a machine without a GPU, so CI builds every line.

find_package(Threads REQUIRED)
find_package(SQLite3 REQUIRED)
# Header-only libraries: their CMake package where installed, else the headers alone (some
# images ship /usr/include/CLI and /usr/include/nlohmann without the CMake files).
find_package(CLI11 CONFIG QUIET)
if(NOT TARGET CLI11::CLI11)
  find_path(CLI11_INCLUDE_DIR CLI/CLI.hpp REQUIRED)
  add_library(CLI11::CLI11 INTERFACE IMPORTED)
  target_include_directories(CLI11::CLI11 INTERFACE ${CLI11_INCLUDE_DIR})
endif()
find_package(nlohmann_json 3.10 CONFIG QUIET)
if(NOT TARGET nlohmann_json::nlohmann_json)
  find_path(NLOHMANN_JSON_INCLUDE_DIR nlohmann/json.hpp REQUIRED)
  add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
  target_include_directories(nlohmann_json::nlohmann_json INTERFACE ${NLOHMANN_JSON_INCLUDE_DIR})
endif()
if(NANPROV_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()

find_package(Python3 COMPONENTS Interpreter REQUIRED)

# Torch's config looks for CUDA itself when the wheel is a CUDA build.
find_package(Torch REQUIRED)
execute_process(
  COMMAND "${Python3_EXECUTABLE}" -c "import torch,sys; sys.stdout.write(torch.__version__ + ' ' + str(int(torch._C._GLIBCXX_USE_CXX11_ABI)))"
  OUTPUT_VARIABLE _torch_info RESULT_VARIABLE _torch_rc)
if(NOT _torch_rc EQUAL 0)
  message(FATAL_ERROR "nanprov: ${Python3_EXECUTABLE} cannot import torch; pass -DPython3_EXECUTABLE=<python with torch>")
endif()
separate_arguments(_torch_info)
list(GET _torch_info 0 NANPROV_TORCH_VERSION)
list(GET _torch_info 1 NANPROV_CXX11_ABI)

include(CheckLanguage)
check_language(CUDA)
set(NANPROV_HAVE_CUDA OFF)
set(NANPROV_HAVE_CUPTI OFF)
set(NANPROV_HAVE_CUDNN OFF)
if(CMAKE_CUDA_COMPILER)
  # Hopper is what nanprov is proven on; Ampere covers the A100s many users still train on.
  set(NANPROV_CUDA_ARCHITECTURES "80;90" CACHE STRING "GPU architectures of nanprov's CUDA kernels")
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  set(NANPROV_HAVE_CUDA ON)
  if(TARGET CUDA::cupti)
    set(NANPROV_HAVE_CUPTI ON)
  endif()
  find_path(CUDNN_INCLUDE_DIR cudnn_version.h HINTS ENV CUDNN_ROOT PATH_SUFFIXES include)
  if(CUDNN_INCLUDE_DIR)
    set(NANPROV_HAVE_CUDNN ON)
  endif()
endif()

# What `nanprov --version` says it was built with: "none" for what was not found.
set(NANPROV_CUDA_VERSION "none")
set(NANPROV_CUPTI_VERSION "none")
set(NANPROV_CUDNN_VERSION "none")
if(NANPROV_HAVE_CUDA)
  set(NANPROV_CUDA_VERSION "${CUDAToolkit_VERSION}")
endif()
if(NANPROV_HAVE_CUPTI)
  find_file(_cupti_version_h cupti_version.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT}/extras/CUPTI/include)
  if(_cupti_version_h)
    file(STRINGS "${_cupti_version_h}" _line REGEX "^#define CUPTI_API_VERSION [0-9]+")
    string(REGEX MATCH "[0-9]+$" _api "${_line}")
    set(NANPROV_CUPTI_VERSION "API ${_api}")
  else()
    set(NANPROV_CUPTI_VERSION "yes")
  endif()
endif()
if(NANPROV_HAVE_CUDNN)
  file(STRINGS "${CUDNN_INCLUDE_DIR}/cudnn_version.h" _lines REGEX "^#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) [0-9]+")
  set(_parts "")
  foreach(_l IN LISTS _lines)
    string(REGEX MATCH "[0-9]+$" _n "${_l}")
    list(APPEND _parts "${_n}")
  endforeach()
  list(JOIN _parts "." NANPROV_CUDNN_VERSION)
endif()
