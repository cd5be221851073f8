# `cmake --install build --prefix PREFIX`: coil as a package other projects build against
# (docs/deploy.md, "Installing coil"):
#   PREFIX/bin/coil                       the command line
#   PREFIX/lib/libcoil.so                 the C++ API (include/coil/coil.h): coil_core whole,
#                                         with its dependencies linked privately, so that a user
#                                         needs only the public headers (which include only the
#                                         standard library) and this library
#   PREFIX/lib/libcoil_c.so               the C ABI (include/coil/coil_c.h; Python loads it)
#   PREFIX/lib/libcoil_runtime.so         the runtime alone (include/coil/runtime.h): loads and
#                                         runs what `coil export` writes; what a deployment links
#   PREFIX/lib/libcoil_extern.so, libcoil_vmath.so   what generated modules link; coil finds
#                                         them beside the library or binary holding it
#                                         (runtime/isa.h, vmath_dir())
#   PREFIX/include/coil/*.h               the public headers
#   PREFIX/lib/cmake/coil/                find_package(coil CONFIG): coil::coil, coil::c and
#                                         coil::runtime
#   PREFIX/lib/pkgconfig/coil.pc, coil_c.pc, coil_runtime.pc
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

add_library(coil_shared SHARED ${COIL_VERSION_CPP})
add_dependencies(coil_shared coil_version_info)
target_link_libraries(coil_shared PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,coil_core>")
target_include_directories(coil_shared INTERFACE $<BUILD_INTERFACE:${CMAKE_SOURCE_DIR}/include>
                                                 $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_compile_features(coil_shared INTERFACE cxx_std_20)
set_target_properties(coil_shared PROPERTIES OUTPUT_NAME coil EXPORT_NAME coil
                                             LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib
                                             INSTALL_RPATH "$ORIGIN")
set_target_properties(coil_c PROPERTIES EXPORT_NAME c)
set_target_properties(coil_runtime PROPERTIES EXPORT_NAME runtime)
add_library(coil::coil ALIAS coil_shared)
add_library(coil::c ALIAS coil_c)
add_library(coil::runtime ALIAS coil_runtime)
set_target_properties(coil PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")

install(TARGETS coil_shared coil_c coil_runtime EXPORT coilTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS coil_extern coil_vmath LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS coil RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/include/coil DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT coilTargets NAMESPACE coil:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/coil)
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/coilConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/package/coilConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/coil)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/package/coilConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/package/coilConfig.cmake
              ${CMAKE_BINARY_DIR}/package/coilConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/coil)
foreach(pc coil coil_c coil_runtime)
  configure_file(${CMAKE_SOURCE_DIR}/cmake/${pc}.pc.in ${CMAKE_BINARY_DIR}/package/${pc}.pc @ONLY)
  install(FILES ${CMAKE_BINARY_DIR}/package/${pc}.pc
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endforeach()
