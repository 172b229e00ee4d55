# CPack: Debian packages built from the install components of cmake/XvkInstall.cmake.
#   libxvk0       runtime      libxvk.so.0 (core + CPU backend)
#   libxvk-dev    development  headers, libxvk.so, CMake package, pkg-config file
#   libxvk-cuda0  cuda         libxvk_cuda.so, only when the target xvk_cuda exists
#   libxvk-hip0   hip          libxvk_hip.so, only when the target xvk_hip exists
# Build them with `cpack -G DEB` in a build tree configured with -DCMAKE_INSTALL_PREFIX=/usr
# (so that GNUInstallDirs picks Debian's multiarch library directory); the test
# packaging.deb.build does exactly that.
set(XVK_DEB_MAINTAINER "xvk maintainers <maintainers@xvk.invalid>" CACHE STRING
    "Maintainer field of the Debian packages (the default is a placeholder: set a real address)")
# The GPU modules need their vendor's runtime at run time. The defaults name Debian 12's packages
# (the CUDA module links the CUDA runtime statically, so it needs the driver library libcuda.so.1;
# the HIP module links ROCm 5.2's libamdhip64.so.5); override them for other vendors' packages.
set(XVK_DEB_CUDA_DEPENDS "libcuda1 | libcuda.so.1" CACHE STRING
    "Depends of libxvk-cuda0 besides libxvk0")
set(XVK_DEB_HIP_DEPENDS "libamdhip64-5" CACHE STRING "Depends of libxvk-hip0 besides libxvk0")
mark_as_advanced(XVK_DEB_MAINTAINER XVK_DEB_CUDA_DEPENDS XVK_DEB_HIP_DEPENDS)

set(CPACK_PACKAGE_NAME xvk)
set(CPACK_PACKAGE_VENDOR "xvk")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
# Each package's first description line is its own synopsis (below). CPackDeb would prepend this
# summary to every description unless it is CPack's built-in default, so it is set to that default.
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_NAME} built using CMake")
set(CPACK_GENERATOR DEB)
set(CPACK_STRIP_FILES ON)
set(CPACK_PACKAGE_DIRECTORY ${PROJECT_BINARY_DIR}/packages)

set(CPACK_COMPONENTS_ALL runtime development)
foreach(module cuda hip)
  if(TARGET xvk_${module})
    list(APPEND CPACK_COMPONENTS_ALL ${module})
  endif()
endforeach()

set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${XVK_DEB_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_COMPRESSION_TYPE xz)
# libxvk0 declares its shared library (shlibs file and the ldconfig trigger); dependencies on
# libc, libstdc++ and libgomp come from dpkg-shlibdeps (dpkg-dev) where it is installed.
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
find_program(XVK_DPKG_SHLIBDEPS dpkg-shlibdeps)
mark_as_advanced(XVK_DPKG_SHLIBDEPS)
if(XVK_DPKG_SHLIBDEPS)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
endif()

set(_xvk_deb_version "${PROJECT_VERSION}")
# Descriptions: the first line is the synopsis; CPackDeb indents the rest and turns empty lines
# into " .".
set(_xvk_about "xvk is a library of fused deep-learning kernels (softmax, LayerNorm,
RMSNorm) behind a stable C ABI, with a CPU backend and loadable CUDA and
HIP backend modules. Tensors are passed as DLPack DLTensors.")

set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME libxvk${PROJECT_VERSION_MAJOR})
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_RUNTIME_DESCRIPTION "fused deep-learning kernels - shared library
${_xvk_about}

This package contains libxvk.so.${PROJECT_VERSION_MAJOR} with the CPU backend.")
# ldconfig runs through dpkg's trigger (CPackDeb also calls it from its postinst and postrm).
set(CPACK_DEBIAN_RUNTIME_PACKAGE_CONTROL_EXTRA ${CMAKE_CURRENT_LIST_DIR}/debian/triggers)

set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_NAME libxvk-dev)
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_DEPENDS
    "libxvk${PROJECT_VERSION_MAJOR} (= ${_xvk_deb_version}), libdlpack-dev")
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_SHLIBDEPS OFF)
set(CPACK_DEBIAN_DEVELOPMENT_DESCRIPTION "fused deep-learning kernels - development files
${_xvk_about}

This package contains the C header, the CMake package (xvk::xvk) and
the pkg-config file.")

foreach(module cuda hip)
  string(TOUPPER ${module} M)
  set(CPACK_DEBIAN_${M}_PACKAGE_NAME libxvk-${module}${PROJECT_VERSION_MAJOR})
  set(CPACK_DEBIAN_${M}_PACKAGE_SECTION libs)
  set(CPACK_DEBIAN_${M}_PACKAGE_SHLIBDEPS OFF)
  set(CPACK_DEBIAN_${M}_PACKAGE_DEPENDS
      "libxvk${PROJECT_VERSION_MAJOR} (= ${_xvk_deb_version}), ${XVK_DEB_${M}_DEPENDS}")
endforeach()
set(CPACK_DEBIAN_CUDA_DESCRIPTION "fused deep-learning kernels - CUDA backend module
${_xvk_about}

This package contains libxvk_cuda.so, which libxvk loads for NVIDIA GPUs.")
set(CPACK_DEBIAN_HIP_DESCRIPTION "fused deep-learning kernels - HIP backend module
${_xvk_about}

This package contains libxvk_hip.so, which libxvk loads for AMD GPUs.")

# Debian wants /usr/share/doc/<package>/changelog.gz (these are native packages) and
# .../copyright in every package. They are installed only for a /usr prefix (the one Debian
# packages are built from) unless XVK_INSTALL_DEBIAN_DOCS says otherwise. The copyright file is
# made from LICENSE at the top of the source tree, and left out while the project has none.
if(CMAKE_INSTALL_PREFIX MATCHES "^/usr/?$")
  set(_xvk_debian_docs ON)
else()
  set(_xvk_debian_docs OFF)
endif()
option(XVK_INSTALL_DEBIAN_DOCS "Install share/doc/<package>/{changelog.gz,copyright} for the Debian packages"
       ${_xvk_debian_docs})
find_program(XVK_GZIP gzip)
mark_as_advanced(XVK_GZIP)
if(XVK_INSTALL_DEBIAN_DOCS AND XVK_GZIP)
  if(DEFINED ENV{SOURCE_DATE_EPOCH})
    set(_xvk_date_epoch "$ENV{SOURCE_DATE_EPOCH}")
  else()
    string(TIMESTAMP _xvk_date_epoch "%s" UTC)
  endif()
  execute_process(COMMAND date -u -R -d "@${_xvk_date_epoch}" OUTPUT_VARIABLE _xvk_date
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  set(_xvk_components runtime development cuda hip)
  foreach(component IN LISTS _xvk_components)
    string(TOUPPER ${component} C)
    set(package ${CPACK_DEBIAN_${C}_PACKAGE_NAME})
    set(dir ${PROJECT_BINARY_DIR}/packaging-files/doc/${package})
    file(WRITE ${dir}/changelog
         "${package} (${_xvk_deb_version}) unstable; urgency=medium\n\n"
         "  * Built with CPack from xvk ${PROJECT_VERSION}.\n\n"
         " -- ${XVK_DEB_MAINTAINER}  ${_xvk_date}\n")
    execute_process(COMMAND ${XVK_GZIP} -9nf ${dir}/changelog)
    set(docs ${dir}/changelog.gz)
    if(EXISTS ${PROJECT_SOURCE_DIR}/LICENSE)
      file(READ ${PROJECT_SOURCE_DIR}/LICENSE _xvk_license)
      file(WRITE ${dir}/copyright "xvk ${PROJECT_VERSION}\n\n${_xvk_license}")
      list(APPEND docs ${dir}/copyright)
    endif()
    install(FILES ${docs} DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/${package} COMPONENT ${component})
  endforeach()
endif()

include(CPack)
