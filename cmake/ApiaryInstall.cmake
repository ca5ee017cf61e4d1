# `cmake --install build`: the libraries, the public headers (every layer's, as api/'s
# include them), the `apiary` command, a CMake package (find_package(apiary), targets
# apiary::api, apiary::actors, apiary::core, ...), apiary.pc, and the Python package.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(_apiary_libs apiary_proto apiary_messages apiary_core apiary_transport apiary_actors apiary_api apiary_cuda)
foreach(_lib IN LISTS _apiary_libs)
  string(REPLACE "apiary_" "" _short ${_lib})
  set_target_properties(${_lib} PROPERTIES EXPORT_NAME ${_short})
endforeach()
set_target_properties(apiary_warnings PROPERTIES EXPORT_NAME warnings)
install(TARGETS ${_apiary_libs} apiary_warnings EXPORT apiaryTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/apiary)
install(TARGETS apiary RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
foreach(_layer messages core transport cuda actors api)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${_layer} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/apiary
          FILES_MATCHING PATTERN "*.hpp" PATTERN "*.cuh" EXCLUDE)
endforeach()
install(DIRECTORY ${PROJECT_BINARY_DIR}/proto/gen/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/apiary
        FILES_MATCHING PATTERN "*.pb.h")

install(EXPORT apiaryTargets NAMESPACE apiary:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/apiary)
# (cuda/ decides NCCL in its own scope; its find results are cache variables.)
set(APIARY_PACKAGE_HAVE_CUDA OFF)
set(APIARY_PACKAGE_HAVE_NCCL OFF)
if(APIARY_ENABLE_CUDA)
  set(APIARY_PACKAGE_HAVE_CUDA ON)
  if(NCCL_LIBRARY AND NCCL_INCLUDE_DIR)
    set(APIARY_PACKAGE_HAVE_NCCL ON)
  endif()
endif()
set(APIARY_PACKAGE_NCCL_LIBRARY "${NCCL_LIBRARY}")
set(APIARY_PACKAGE_NCCL_INCLUDE_DIR "${NCCL_INCLUDE_DIR}")
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/apiaryConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/apiaryConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/apiary)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/apiaryConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/apiaryConfig.cmake ${PROJECT_BINARY_DIR}/apiaryConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/FindCAF.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/apiary)

# pkg-config: the layers in link order, then what they link (CAF has no .pc of its own).
set(_apiary_pc_libs "-lapiary_api -lapiary_actors -lapiary_transport -lapiary_core -lapiary_messages -lapiary_proto -lapiary_cuda")
set(_apiary_pc_private "-lcaf_io -lcaf_core -lpthread")
if(APIARY_ENABLE_CUDA)
  find_package(CUDAToolkit QUIET)  # cuda/ found it in its own scope
  string(APPEND _apiary_pc_private " -L${CUDAToolkit_LIBRARY_DIR} -lcudart_static -ldl -lrt")
endif()
if(APIARY_PACKAGE_HAVE_NCCL)
  get_filename_component(_nccl_dir "${NCCL_LIBRARY}" DIRECTORY)
  get_filename_component(_nccl_name "${NCCL_LIBRARY}" NAME)
  string(APPEND _apiary_pc_private " -L${_nccl_dir} -l:${_nccl_name}")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/apiary.pc.in ${PROJECT_BINARY_DIR}/apiary.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/apiary.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# The Python package, into the interpreter's site directory under the prefix (Debian:
# /usr/lib/python3/dist-packages, /usr/local/lib/python3.X/dist-packages).
if(TARGET _apiary)
  if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
    set(_apiary_site lib/python3/dist-packages)
  else()
    set(_apiary_site lib/python${Python_VERSION_MAJOR}.${Python_VERSION_MINOR}/dist-packages)
  endif()
  set(APIARY_PYTHON_INSTALL_DIR ${_apiary_site} CACHE STRING "where (under the prefix) the Python package goes")
  install(DIRECTORY ${APIARY_PYTHON_DIR}/apiary DESTINATION ${APIARY_PYTHON_INSTALL_DIR}
          PATTERN "__pycache__" EXCLUDE)
endif()
