# What `cmake --install` lays out, relative to the prefix:
#   lib/libxvk.so.0*           runtime      (libxvk0)
#   lib/libxvk_cuda.so         cuda         (libxvk-cuda0), only when the module is built
#   lib/libxvk_hip.so          hip          (libxvk-hip0), only when the module is built
#   lib/libxvk.so              development  (libxvk-dev), the link-time name
#   include/xvk/xvk.h          development
#   lib/cmake/xvk/             development: xvk-config.cmake (imported target xvk::xvk),
#                              xvk-config-version.cmake, xvk-targets*.cmake
#   lib/pkgconfig/xvk.pc       development
# "lib" is CMAKE_INSTALL_LIBDIR (GNUInstallDirs: lib/<multiarch> for a /usr prefix on Debian).
# The component names are the CPack components of cmake/XvkPackaging.cmake and the conda outputs
# of recipe/meta.yaml. Backend modules sit next to libxvk because that is where its loader looks.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(XVK_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/xvk" CACHE STRING
    "Where xvk-config.cmake is installed, relative to the prefix")
mark_as_advanced(XVK_INSTALL_CMAKEDIR)

install(TARGETS xvk EXPORT xvk-targets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT development
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT development)
foreach(module cuda hip)
  if(TARGET xvk_${module})
    install(TARGETS xvk_${module}
      LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT ${module}
      RUNTIME DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT ${module})
  endif()
endforeach()

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/xvk DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        COMPONENT development FILES_MATCHING PATTERN "*.h")

# CMake package: find_package(xvk) gives xvk::xvk, whose interface brings dlpack::dlpack.
install(EXPORT xvk-targets NAMESPACE xvk:: DESTINATION ${XVK_INSTALL_CMAKEDIR} COMPONENT development)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/xvk-config.cmake.in
  ${PROJECT_BINARY_DIR}/packaging-files/xvk-config.cmake INSTALL_DESTINATION ${XVK_INSTALL_CMAKEDIR})
# Within one major version the ABI only grows (DESIGN.md), as SameMajorVersion assumes.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/packaging-files/xvk-config-version.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/packaging-files/xvk-config.cmake
              ${PROJECT_BINARY_DIR}/packaging-files/xvk-config-version.cmake
        DESTINATION ${XVK_INSTALL_CMAKEDIR} COMPONENT development)

# pkg-config. For a /usr prefix (a distribution package) the paths are absolute; otherwise they
# are relative to the .pc file, so `cmake --install --prefix <anywhere>` and conda's relocation
# both give a working file.
if(CMAKE_INSTALL_PREFIX MATCHES "^/usr/?$" OR IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}"
   OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(XVK_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH _xvk_up "/root/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/root")
  string(REGEX REPLACE "/$" "" _xvk_up "${_xvk_up}")
  set(XVK_PC_PREFIX "\${pcfiledir}/${_xvk_up}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(XVK_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
else()
  set(XVK_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(XVK_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(XVK_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
# dlpack ships no .pc file (Debian, conda): its header directory goes into Cflags when it is not
# one the compiler searches anyway.
set(XVK_PC_DLPACK_CFLAGS "")
get_target_property(_xvk_dlpack_inc dlpack::dlpack INTERFACE_INCLUDE_DIRECTORIES)
foreach(dir IN LISTS _xvk_dlpack_inc)
  if(dir AND NOT dir IN_LIST CMAKE_C_IMPLICIT_INCLUDE_DIRECTORIES
     AND NOT dir STREQUAL "${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_INCLUDEDIR}")
    string(APPEND XVK_PC_DLPACK_CFLAGS " -I${dir}")
  endif()
endforeach()
configure_file(${CMAKE_CURRENT_LIST_DIR}/xvk.pc.in ${PROJECT_BINARY_DIR}/packaging-files/xvk.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/packaging-files/xvk.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT development)
