# apiary_layer(NAME PUBLIC_DEPS...): one library per layer, built from every .cpp below
# the calling folder, linking the warnings target privately.
function(apiary_layer name)
  file(GLOB_RECURSE _srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp)
  if(_srcs)
    add_library(${name} STATIC ${_srcs})
    target_link_libraries(${name} PUBLIC ${ARGN} PRIVATE apiary_warnings)
    target_include_directories(${name} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
                                             $<INSTALL_INTERFACE:include/apiary>)
  else()
    add_library(${name} INTERFACE)   # a layer with headers only (so far)
    target_link_libraries(${name} INTERFACE ${ARGN})
    target_include_directories(${name} INTERFACE $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
                                                $<INSTALL_INTERFACE:include/apiary>)
  endif()
endfunction()
