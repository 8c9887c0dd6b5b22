# Installs the gryph build into a temporary prefix, then configures, builds and runs the consumer
# project against it, with CMake and with pkg-config. Everything happens under one temporary
# directory that is removed at the end.
string(RANDOM LENGTH 12 suffix)
if(DEFINED ENV{TMPDIR})
  set(tmp "$ENV{TMPDIR}/gryph-consumer-${suffix}")
else()
  set(tmp "/tmp/gryph-consumer-${suffix}")
endif()

function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    file(REMOVE_RECURSE "${tmp}")
    message(FATAL_ERROR "failed: ${ARGV}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()

run(${CMAKE_COMMAND} --install "${GRYPH_BINARY_DIR}" --prefix "${tmp}/prefix")
set(flags "")
if(GRYPH_SANITIZE STREQUAL "address")
  set(flags "-fsanitize=address,undefined")
elseif(GRYPH_SANITIZE STREQUAL "thread")
  set(flags "-fsanitize=thread")
endif()
run(${CMAKE_COMMAND} -S "${CONSUMER_SOURCE_DIR}" -B "${tmp}/build"
    -DCMAKE_PREFIX_PATH=${tmp}/prefix -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER}
    "-DCMAKE_CXX_FLAGS=${flags}")
run(${CMAKE_COMMAND} --build "${tmp}/build")
run("${tmp}/build/consumer")

# The same program built by hand from gryph.pc, as a pkg-config user would.
set(ENV{PKG_CONFIG_PATH} "${tmp}/prefix/lib/pkgconfig")
foreach(dir lib lib64 lib/x86_64-linux-gnu)
  if(EXISTS "${tmp}/prefix/${dir}/pkgconfig/gryph.pc")
    set(ENV{PKG_CONFIG_PATH} "${tmp}/prefix/${dir}/pkgconfig")
  endif()
endforeach()
execute_process(COMMAND pkg-config --cflags --libs gryph RESULT_VARIABLE rc
                OUTPUT_VARIABLE pc_flags ERROR_VARIABLE err OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT rc EQUAL 0)
  file(REMOVE_RECURSE "${tmp}")
  message(FATAL_ERROR "pkg-config --cflags --libs gryph failed: ${err}")
endif()
separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
separate_arguments(san_flags UNIX_COMMAND "${flags}")
run(${CMAKE_CXX_COMPILER} -std=c++20 ${san_flags} "${CONSUMER_SOURCE_DIR}/main.cc"
    -o "${tmp}/consumer_pc" ${pc_flags})
run("${tmp}/consumer_pc")
execute_process(COMMAND pkg-config --exists gryph-zmq RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  file(REMOVE_RECURSE "${tmp}")
  message(FATAL_ERROR "gryph-zmq.pc is not installed")
endif()

# The license and the documentation are installed beside the library.
foreach(doc LICENSE README.md design.md format.md)
  if(NOT EXISTS "${tmp}/prefix/share/doc/gryph/${doc}")
    file(REMOVE_RECURSE "${tmp}")
    message(FATAL_ERROR "share/doc/gryph/${doc} is not installed")
  endif()
endforeach()
file(REMOVE_RECURSE "${tmp}")
