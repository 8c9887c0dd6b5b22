# Installs the gryph build into a temporary prefix, then configures, builds and runs the consumer
# project against it. Everything happens under one temporary directory that is removed at the end.
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
file(REMOVE_RECURSE "${tmp}")
