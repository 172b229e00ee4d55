# The HIP build of the kernel source in src/cuda ("hipify at build time").
#
# xvk does not translate CUDA text into HIP text. The kernels are written
# against src/cuda/portability.cuh, whose __HIPCC__ branch maps every runtime
# call, warp-width constant, lane mask, shuffle and half type to HIP. So the
# "hipify step" is: compile the very same .cu files with hipcc as HIP
# (-x hip), once per AMD target, into position-independent objects that the
# host linker puts into libxvk_hip.so. hipcc is called directly through custom
# commands because CMake 3.25's HIP language does not work with Debian's ROCm
# layout, and making hipcc the C++ compiler of the whole build would compile
# libxvk with it too (libxvk must not depend on any GPU runtime).
#
#   XVK_HIPCC         the hipcc to use (found on PATH or under ROCM_PATH)
#   XVK_HIP_TARGETS   the --offload-arch targets (the hip preset: gfx908,
#                     gfx90a, gfx940, gfx1030)
#   XVK_HIP_FLAGS     extra flags for every hipcc call
#
# xvk_hip_objects(<out-var> SOURCES <file>... [INCLUDE_DIRECTORIES <dir>...]
#                 [DEFINITIONS <name[=value]>...])
#   Adds one custom command per source, producing <binary-dir>/hip/<name>.o
#   with device code for every XVK_HIP_TARGETS entry, and sets <out-var> to
#   the list of objects. Header dependencies come from hipcc's depfile.

include_guard(GLOBAL)

set(XVK_HIP_TARGETS "gfx908;gfx90a;gfx940;gfx1030" CACHE STRING "AMD GPU targets (--offload-arch) of libxvk_hip.so")
set(XVK_HIP_FLAGS "" CACHE STRING "Extra flags for every hipcc call")
find_program(XVK_HIPCC NAMES hipcc HINTS ENV ROCM_PATH PATH_SUFFIXES bin REQUIRED
             DOC "hipcc, the HIP compiler driver")
# hip::host: libamdhip64 (and the compiler-rt builtins clang's host code may call).
find_package(hip CONFIG REQUIRED)

if(NOT XVK_HIP_TARGETS)
  message(FATAL_ERROR "XVK_HIP_TARGETS is empty: name the AMD targets, e.g. gfx90a;gfx1030")
endif()
message(STATUS "xvk: HIP module for ${XVK_HIP_TARGETS} with ${XVK_HIPCC}")

function(xvk_hip_objects out_var)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "SOURCES;INCLUDE_DIRECTORIES;DEFINITIONS")
  set(flags -x hip -std=c++17 -O3 -fPIC -fvisibility=hidden -fvisibility-inlines-hidden -DNDEBUG
            -Wall -Wextra -Wshadow -Wno-unused-parameter)
  foreach(target IN LISTS XVK_HIP_TARGETS)
    list(APPEND flags --offload-arch=${target})
  endforeach()
  foreach(dir IN LISTS arg_INCLUDE_DIRECTORIES)
    list(APPEND flags -I${dir})
  endforeach()
  foreach(def IN LISTS arg_DEFINITIONS)
    list(APPEND flags -D${def})
  endforeach()
  separate_arguments(extra UNIX_COMMAND "${XVK_HIP_FLAGS}")
  list(APPEND flags ${extra})

  set(objects "")
  foreach(src IN LISTS arg_SOURCES)
    get_filename_component(src "${src}" ABSOLUTE)
    get_filename_component(name "${src}" NAME_WE)
    set(obj ${CMAKE_CURRENT_BINARY_DIR}/hip/${name}.o)
    file(RELATIVE_PATH rel_src ${PROJECT_SOURCE_DIR} ${src})
    add_custom_command(
      OUTPUT ${obj}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_CURRENT_BINARY_DIR}/hip
      COMMAND ${XVK_HIPCC} ${flags} -MD -MF ${obj}.d -MT ${obj} -c ${src} -o ${obj}
      DEPENDS ${src}
      DEPFILE ${obj}.d
      COMMENT "hipcc ${rel_src} for ${XVK_HIP_TARGETS}"
      VERBATIM)
    list(APPEND objects ${obj})
  endforeach()
  set_source_files_properties(${objects} PROPERTIES EXTERNAL_OBJECT TRUE GENERATED TRUE)
  set(${out_var} ${objects} PARENT_SCOPE)
endfunction()
