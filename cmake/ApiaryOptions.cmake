# The options and the warnings/standard INTERFACE target every target links PRIVATE:
# what the top level and cuda/ built as a project of its own (cuda/CMakeLists.txt) both
# define, included once, after project().
include(CheckLanguage)
check_language(CUDA)
if(CMAKE_CUDA_COMPILER)
  set(_apiary_cuda_default ON)
else()
  set(_apiary_cuda_default OFF)
endif()
option(APIARY_ENABLE_CUDA "Build CUDA kernels and link NCCL" ${_apiary_cuda_default})
option(APIARY_WERROR "Treat warnings as errors" OFF)
option(APIARY_BUILD_TESTS "Build the tests" ON)

add_library(apiary_warnings INTERFACE)
target_compile_features(apiary_warnings INTERFACE cxx_std_17)
target_compile_options(apiary_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${APIARY_WERROR}>>:-Werror>)
# GCC's -O2 vectorizes only loops that need no scalar remainder ("very cheap" cost model),
# which leaves the element-wise kernels (averaging, deltas, codecs, optimizers) scalar.
# The dynamic model vectorizes them as -O3 would; element-wise float code keeps its bits
# (no reassociation without -ffast-math).
target_compile_options(apiary_warnings INTERFACE
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-fvect-cost-model=dynamic>)
set(CMAKE_CXX_EXTENSIONS OFF)
