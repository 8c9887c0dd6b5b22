# gryph_warnings(target): the project's own code builds with warnings as errors.
# Clang also checks Abseil's lock annotations and must-use-result markers, which GCC ignores.
function(gryph_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow
    -Wnon-virtual-dtor -Wimplicit-fallthrough -Werror)
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    target_compile_options(${target} PRIVATE -Wthread-safety -Werror=unused-result)
  endif()
endfunction()
