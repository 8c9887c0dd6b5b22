# Fails unless README.md contains examples/readme_example.cc verbatim, so that the program the
# README shows is the one a test compiles and runs.
#   cmake -DREADME=<README.md> -DEXAMPLE=<readme_example.cc> -P readme_in_sync.cmake
file(READ "${README}" readme)
file(READ "${EXAMPLE}" example)
string(FIND "${readme}" "${example}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${README} does not contain ${EXAMPLE} verbatim: paste the file into its "
                      "\"A first program\" section")
endif()
