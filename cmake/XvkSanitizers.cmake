# XVK_SANITIZE (e.g. "address;undefined") instruments every C/C++ target of the build.
if(XVK_SANITIZE)
  list(JOIN XVK_SANITIZE "," _xvk_sanitizers)
  add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=${_xvk_sanitizers}>
                      $<$<COMPILE_LANGUAGE:C,CXX>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:C,CXX>:-fno-sanitize-recover=all>)
  add_link_options(-fsanitize=${_xvk_sanitizers})
endif()
