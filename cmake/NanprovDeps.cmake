# Every dependency is found with find_package; nothing is vendored.
# Required everywhere: SQLite3, CLI11, nlohmann_json, Threads; GoogleTest for tests.
# LibTorch comes from the Python environment that runs the training (Python3_EXECUTABLE; pip
# passes its own), found through that torch's torch.utils.cmake_prefix_path, so the C++ ABI matches.
# Optional: the CUDA Toolkit (with CUPTI and NVTX 3) and cuDNN. Parts that need them compile
# whenever they are found, even on a machine without a GPU, so CI builds every line.

# A system package that is missing stops the build with one line that names what to install.
function(nanprov_require found what apt conda)
  if(NOT ${found})
    message(FATAL_ERROR "nanprov: ${what} not found; install it (apt: ${apt}; conda: conda install -c conda-forge ${conda}) and build again")
  endif()
endfunction()

find_package(Threads REQUIRED)
find_package(SQLite3 QUIET)
nanprov_require(SQLite3_FOUND "SQLite 3 (headers and library)" libsqlite3-dev sqlite)
# Header-only libraries: their CMake package where installed, else the headers alone (some
# images ship /usr/include/CLI and /usr/include/nlohmann without the CMake files).
find_package(CLI11 CONFIG QUIET)
if(NOT TARGET CLI11::CLI11)
  find_path(CLI11_INCLUDE_DIR CLI/CLI.hpp)
  nanprov_require(CLI11_INCLUDE_DIR "CLI11 (CLI/CLI.hpp)" libcli11-dev cli11)
  add_library(CLI11::CLI11 INTERFACE IMPORTED)
  target_include_directories(CLI11::CLI11 INTERFACE ${CLI11_INCLUDE_DIR})
endif()
find_package(nlohmann_json 3.10 CONFIG QUIET)
if(NOT TARGET nlohmann_json::nlohmann_json)
  find_path(NLOHMANN_JSON_INCLUDE_DIR nlohmann/json.hpp)
  nanprov_require(NLOHMANN_JSON_INCLUDE_DIR "nlohmann-json (nlohmann/json.hpp)" nlohmann-json3-dev nlohmann_json)
  add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
  target_include_directories(nlohmann_json::nlohmann_json INTERFACE ${NLOHMANN_JSON_INCLUDE_DIR})
endif()
if(NANPROV_BUILD_TESTS)
  find_package(GTest QUIET)
  nanprov_require(GTest_FOUND "GoogleTest (only for the tests: -DNANPROV_BUILD_TESTS=OFF skips them)" libgtest-dev gtest)
endif()

find_package(Python3 COMPONENTS Interpreter REQUIRED)

# Torch's CMake package lies inside the torch that Python imports.
if(NOT Torch_DIR)
  execute_process(COMMAND "${Python3_EXECUTABLE}" -c "import torch.utils; print(torch.utils.cmake_prefix_path, end='')"
                  OUTPUT_VARIABLE _torch_prefix RESULT_VARIABLE _torch_prefix_rc ERROR_QUIET)
  if(_torch_prefix_rc EQUAL 0)
    list(APPEND CMAKE_PREFIX_PATH "${_torch_prefix}")
  endif()
endif()
# Torch's config looks for CUDA itself when the wheel is a CUDA build.
find_package(Torch QUIET)
if(NOT Torch_FOUND)
  message(FATAL_ERROR "nanprov: ${Python3_EXECUTABLE} has no importable torch with its CMake files; install torch "
                      "there first (nanprov builds against the torch you train with), or pass -DPython3_EXECUTABLE")
endif()
execute_process(
  COMMAND "${Python3_EXECUTABLE}" -c "import torch,sys; sys.stdout.write(torch.__version__ + ' ' + str(int(torch._C._GLIBCXX_USE_CXX11_ABI)) + ' ' + (torch.version.cuda or 'none'))"
  OUTPUT_VARIABLE _torch_info RESULT_VARIABLE _torch_rc)
if(NOT _torch_rc EQUAL 0)
  message(FATAL_ERROR "nanprov: ${Python3_EXECUTABLE} cannot import torch; pass -DPython3_EXECUTABLE=<python with torch>")
endif()
separate_arguments(_torch_info)
list(GET _torch_info 0 NANPROV_TORCH_VERSION)
list(GET _torch_info 1 NANPROV_CXX11_ABI)
# The CUDA runtime torch itself was built with ("none" for a CPU build such as 2.13.0+cpu): what
# `nanprov --version` names as CUDA, apart from the toolkit that compiled nanprov's own kernels.
list(GET _torch_info 2 NANPROV_TORCH_CUDA)

include(CheckLanguage)
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  message(NOTICE "nanprov: no CUDA toolkit (nvcc) found: building the CPU checks only; CUDA checks and CUPTI "
                 "kernel tracing need the toolkit at build time")
endif()
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
  if(NOT TARGET CUDA::cupti)
    # A toolkit without CUPTI: the nvidia-cuda-cupti wheel (a CUDA torch's dependency) has it.
    execute_process(COMMAND "${Python3_EXECUTABLE}" -c "import nvidia.cuda_cupti as m; print(list(m.__path__)[0], end='')"
                    OUTPUT_VARIABLE _cupti_wheel RESULT_VARIABLE _cupti_wheel_rc ERROR_QUIET)
    file(GLOB _cupti_wheel_lib "${_cupti_wheel}/lib/libcupti.so*")
    if(_cupti_wheel_rc EQUAL 0 AND _cupti_wheel_lib AND EXISTS "${_cupti_wheel}/include/cupti.h")
      list(GET _cupti_wheel_lib 0 _cupti_wheel_lib)
      add_library(CUDA::cupti SHARED IMPORTED)
      set_target_properties(CUDA::cupti PROPERTIES IMPORTED_LOCATION "${_cupti_wheel_lib}"
                            INTERFACE_INCLUDE_DIRECTORIES "${_cupti_wheel}/include")
      list(APPEND CUDAToolkit_INCLUDE_DIRS "${_cupti_wheel}/include")
    endif()
  endif()
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
