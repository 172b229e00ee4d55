# Warnings for the project's own C and C++ code (not for nvcc/hipcc device code).
function(xvk_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:C,CXX>:-Wall -Wextra -Wshadow -Wno-unused-parameter>)
endfunction()
