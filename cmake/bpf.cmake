# BPF toolchain: clang -target bpf, bpftool for vmlinux.h, static linking and skeletons.
include(${CMAKE_CURRENT_LIST_DIR}/subdirs.cmake)

if(NOT MCP_BUILD_BPF)
  return()
endif()

find_program(BPF_CLANG NAMES clang clang-16 clang-15 clang-14)
if(NOT BPF_CLANG)
  message(FATAL_ERROR "clang not found: it compiles the BPF programs (run scripts/setup)")
endif()
find_program(BPFTOOL NAMES bpftool PATHS /usr/sbin /usr/local/sbin)
if(NOT BPFTOOL)
  message(FATAL_ERROR "bpftool not found: it makes vmlinux.h and the skeletons (run scripts/setup)")
endif()

set(VMLINUX_H "" CACHE FILEPATH "Use this vmlinux.h instead of dumping /sys/kernel/btf/vmlinux")
set(MCP_VMLINUX_DIR ${CMAKE_BINARY_DIR}/vmlinux)
if(VMLINUX_H)
  if(NOT EXISTS ${VMLINUX_H})
    message(FATAL_ERROR "VMLINUX_H=${VMLINUX_H} does not exist")
  endif()
  configure_file(${VMLINUX_H} ${MCP_VMLINUX_DIR}/vmlinux.h COPYONLY)
else()
  if(NOT EXISTS /sys/kernel/btf/vmlinux)
    message(FATAL_ERROR "/sys/kernel/btf/vmlinux missing: this kernel has no BTF; pass -DVMLINUX_H=path")
  endif()
  file(MAKE_DIRECTORY ${MCP_VMLINUX_DIR})
  execute_process(COMMAND ${BPFTOOL} btf dump file /sys/kernel/btf/vmlinux format c
                  OUTPUT_FILE ${MCP_VMLINUX_DIR}/vmlinux.h RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "bpftool btf dump failed: ${err}")
  endif()
endif()

if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  set(MCP_BPF_ARCH x86)
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "aarch64|arm64")
  set(MCP_BPF_ARCH arm64)
else()
  set(MCP_BPF_ARCH ${CMAKE_SYSTEM_PROCESSOR})
endif()

# mcp_bpf_skeleton(NAME name SOURCES a.bpf.c b.bpf.c DEPENDS headers...)
# Compiles each source, links the objects into one (shared maps declared __weak in a header),
# and generates ${name}.skel.h. Creates INTERFACE target ${name}_skel carrying the include dir.
function(mcp_bpf_skeleton)
  cmake_parse_arguments(ARG "" "NAME" "SOURCES;DEPENDS" ${ARGN})
  set(outdir ${CMAKE_CURRENT_BINARY_DIR})
  # libbpf's usdt.bpf.h includes <linux/errno.h>, whose <asm/errno.h> is in the multiarch
  # directory a -target bpf compile does not search (libbpf-tools adds it the same way).
  set(MCP_BPF_SYS_INCLUDES)
  if(CMAKE_LIBRARY_ARCHITECTURE)
    set(MCP_BPF_SYS_INCLUDES -idirafter /usr/include/${CMAKE_LIBRARY_ARCHITECTURE})
  endif()
  set(objs)
  foreach(src ${ARG_SOURCES})
    get_filename_component(stem ${src} NAME_WE)
    set(obj ${outdir}/${stem}.bpf.o)
    add_custom_command(OUTPUT ${obj}
      COMMAND ${BPF_CLANG} -g -O2 -target bpf -D__TARGET_ARCH_${MCP_BPF_ARCH}
              -I${MCP_VMLINUX_DIR} -I${CMAKE_CURRENT_SOURCE_DIR} ${MCP_BPF_SYS_INCLUDES} -Wall -Werror
              -Wno-unused-function -c ${CMAKE_CURRENT_SOURCE_DIR}/${src} -o ${obj}
      DEPENDS ${src} ${ARG_DEPENDS}
      COMMENT "BPF ${src}" VERBATIM)
    list(APPEND objs ${obj})
  endforeach()
  set(linked ${outdir}/${ARG_NAME}.bpf.o)
  set(skel ${outdir}/${ARG_NAME}.skel.h)
  add_custom_command(OUTPUT ${linked} ${skel}
    COMMAND ${BPFTOOL} gen object ${linked} ${objs}
    COMMAND ${BPFTOOL} gen skeleton ${linked} name ${ARG_NAME} > ${skel}
    DEPENDS ${objs}
    COMMENT "BPF skeleton ${ARG_NAME}.skel.h" VERBATIM)
  add_custom_target(${ARG_NAME}_skel_gen DEPENDS ${skel})
  add_library(${ARG_NAME}_skel INTERFACE)
  add_dependencies(${ARG_NAME}_skel ${ARG_NAME}_skel_gen)
  target_include_directories(${ARG_NAME}_skel INTERFACE ${outdir} ${CMAKE_CURRENT_SOURCE_DIR})
  target_link_libraries(${ARG_NAME}_skel INTERFACE PkgConfig::LIBBPF PkgConfig::LIBELF)
endfunction()
