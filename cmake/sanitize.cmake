# COIL_SANITIZE: build coil, its libraries, tests and tools, and the kernels it generates at run
# time, with sanitizers (docs/debugging.md, "Sanitizers"; scripts/sanitize.sh runs the lanes).
#   -DCOIL_SANITIZE=address,undefined   AddressSanitizer (+ LeakSanitizer) and UBSan
#   -DCOIL_SANITIZE=thread              ThreadSanitizer
# A comma list of address, undefined and thread; thread cannot be combined with address (gcc
# refuses). Empty (the default): a normal build, nothing here changes it.
#
# Defines COIL_SANITIZE_FLAGS (a list) for the rest of the build. runtime/toolchain.cpp gets the
# same flags as the compile definition COIL_SANITIZE_FLAGS (one string, space-separated) and
# appends them to the flags of every generated kernel, so that the kernels' code is checked too
# and a sanitized build never shares a code-cache entry with a normal one (the flags are part of
# the compile command, which is part of the key).
set(COIL_SANITIZE "" CACHE STRING
    "Sanitizers for coil and its generated kernels: address,undefined or thread (empty: none)")

set(COIL_SANITIZE_FLAGS "")
if(NOT COIL_SANITIZE STREQUAL "")
  string(REPLACE "," ";" coil_sanitizers "${COIL_SANITIZE}")
  set(coil_known_sanitizers address undefined thread)
  foreach(s IN LISTS coil_sanitizers)
    if(NOT s IN_LIST coil_known_sanitizers)
      message(FATAL_ERROR "COIL_SANITIZE=${COIL_SANITIZE}: unknown sanitizer '${s}'; expected a "
                          "comma list of address, undefined, thread (e.g. address,undefined)")
    endif()
  endforeach()
  if("thread" IN_LIST coil_sanitizers AND "address" IN_LIST coil_sanitizers)
    message(FATAL_ERROR "COIL_SANITIZE=${COIL_SANITIZE}: thread and address cannot be combined "
                        "(use two builds: address,undefined and thread)")
  endif()
  list(REMOVE_DUPLICATES coil_sanitizers)
  list(JOIN coil_sanitizers "," coil_sanitize_joined)
  # -fsanitize=...: the instrumentation, and at link time the runtime (gcc links libasan,
  #   libubsan or libtsan dynamically, into executables and shared objects alike).
  # -fno-omit-frame-pointer: the sanitizers' fast frame-pointer unwinder gives complete stacks
  #   in reports (the allocation and free stacks of ASan, both accesses of a TSan race).
  list(APPEND COIL_SANITIZE_FLAGS -fsanitize=${coil_sanitize_joined} -fno-omit-frame-pointer)
  if("undefined" IN_LIST coil_sanitizers)
    # A UBSan finding aborts the process (non-zero exit, the test fails) instead of printing a
    # message and going on, which a passing test would hide.
    list(APPEND COIL_SANITIZE_FLAGS -fno-sanitize-recover=undefined)
  endif()
  add_compile_options(${COIL_SANITIZE_FLAGS})
  add_link_options(-fsanitize=${coil_sanitize_joined})
  list(JOIN COIL_SANITIZE_FLAGS " " coil_sanitize_string)
  set_property(SOURCE ${CMAKE_SOURCE_DIR}/src/runtime/toolchain.cpp APPEND PROPERTY
               COMPILE_DEFINITIONS COIL_SANITIZE_FLAGS="${coil_sanitize_string}")
  message(STATUS "COIL_SANITIZE: ${COIL_SANITIZE_FLAGS} (coil, its tests and generated kernels)")
endif()
