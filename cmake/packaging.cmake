# CPack: one Debian package, mcp-sampling, with both binaries, the systemd units, the
# default agent configuration (a conffile that works on any host), the annotated example
# (/usr/share/doc/mcp-sampling/examples/agent.yaml), the deployment docs, the man pages, bash
# completion, the copyright file and the changelog. lintian accepts it with no error and no
# warning (tests/e2e/packaging/deb_lint_test.cpp).
#   cmake --build build && (cd build && cpack -G DEB)
# The binaries' own install() rules live next to them (agent/, broker/) and put them in
# bin/ (/usr/bin in the package); this file adds everything that is not a build target.
set(MCP_PKG_DIR ${PROJECT_SOURCE_DIR}/packaging)

install(FILES ${MCP_PKG_DIR}/systemd/mcp-agent.service ${MCP_PKG_DIR}/systemd/mcp-broker.service
        DESTINATION /lib/systemd/system)

set(MCP_CONFFILES "")
if(EXISTS ${MCP_PKG_DIR}/config/agent.yaml)
  install(FILES ${MCP_PKG_DIR}/config/agent.yaml DESTINATION /etc/mcp-agent)
  string(APPEND MCP_CONFFILES "/etc/mcp-agent/agent.yaml\n")
endif()
# dpkg keeps an operator's edits to conffiles across upgrades instead of overwriting them.
file(WRITE ${CMAKE_BINARY_DIR}/packaging/deb/conffiles "${MCP_CONFFILES}")

foreach(doc README.md CAPABILITIES.md)
  if(EXISTS ${MCP_PKG_DIR}/${doc})
    install(FILES ${MCP_PKG_DIR}/${doc} DESTINATION share/doc/mcp-sampling)
  endif()
endforeach()
# The annotated example with every option; the conffile above is the short default.
install(FILES ${MCP_PKG_DIR}/config/agent.example.yaml DESTINATION share/doc/mcp-sampling/examples
        RENAME agent.yaml)
# tokens/ holds the broker's generated secrets, never packaged.
install(DIRECTORY ${MCP_PKG_DIR}/k8s/ DESTINATION share/doc/mcp-sampling/k8s FILES_MATCHING PATTERN "*.yaml"
        PATTERN tokens EXCLUDE)

# Debian policy: the licence in machine-readable form, and the changelog compressed with
# gzip -9n (no name or time stamp, so the package is reproducible). The package's version is
# its upstream version (a native package), which lintian wants as changelog.gz.
install(FILES ${MCP_PKG_DIR}/deb/copyright DESTINATION share/doc/mcp-sampling)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${MCP_PKG_DIR}/deb/changelog)
file(STRINGS ${MCP_PKG_DIR}/deb/changelog MCP_CHANGELOG_TOP LIMIT_COUNT 1)
if(NOT MCP_CHANGELOG_TOP MATCHES "^mcp-sampling \\(${PROJECT_VERSION}\\) ")
  message(FATAL_ERROR "packaging/deb/changelog: the first entry must be for ${PROJECT_VERSION}: ${MCP_CHANGELOG_TOP}")
endif()
execute_process(COMMAND gzip -9n -c ${MCP_PKG_DIR}/deb/changelog
                OUTPUT_FILE ${CMAKE_BINARY_DIR}/packaging/deb/changelog.gz COMMAND_ERROR_IS_FATAL ANY)
install(FILES ${CMAKE_BINARY_DIR}/packaging/deb/changelog.gz DESTINATION share/doc/mcp-sampling)

# Bash completion: one script for both programs; it reads their --help.
install(FILES ${MCP_PKG_DIR}/bash-completion/mcp-agent DESTINATION share/bash-completion/completions)
install(FILES ${MCP_PKG_DIR}/bash-completion/mcp-agent DESTINATION share/bash-completion/completions
        RENAME mcp-broker)

# Man pages mcp-agent(8) and mcp-broker(8), written by packaging/man/mkman from the built
# binary's --help (help2man) and packaging/man/NAME.h2m (exit status, files, examples).
# `cmake --build` writes them into build/man; installing (cpack) writes them again from the
# binary being packaged, so the package's pages always match its binaries, even when only
# the binaries were built.
find_program(MCP_HELP2MAN help2man)
if(NOT MCP_HELP2MAN)
  message(WARNING "help2man not found (scripts/setup installs it): the package will have no man pages")
endif()
set(MCP_MAN_PAGES "")
foreach(prog mcp-agent mcp-broker)
  if(NOT MCP_HELP2MAN OR NOT TARGET ${prog})
    continue()
  endif()
  set(page ${CMAKE_BINARY_DIR}/man/${prog}.8.gz)
  set(mkman ${MCP_PKG_DIR}/man/mkman $<TARGET_FILE:${prog}> ${PROJECT_VERSION}
            ${MCP_PKG_DIR}/man/${prog}.h2m ${page})
  add_custom_command(OUTPUT ${page} COMMAND ${mkman}
    DEPENDS ${prog} ${MCP_PKG_DIR}/man/mkman ${MCP_PKG_DIR}/man/${prog}.h2m ${MCP_PKG_DIR}/deb/changelog
    COMMENT "Man page ${prog}(8) from ${prog} --help" VERBATIM)
  list(APPEND MCP_MAN_PAGES ${page})
  list(JOIN mkman "\" \"" mkman_args)
  install(CODE "execute_process(COMMAND \"${mkman_args}\" COMMAND_ERROR_IS_FATAL ANY)")
  install(FILES ${page} DESTINATION share/man/man8)
endforeach()
if(MCP_MAN_PAGES)
  add_custom_target(man ALL DEPENDS ${MCP_MAN_PAGES})
endif()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME mcp-sampling)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "mcp-sampling")
set(CPACK_PACKAGE_CONTACT "mcp-sampling maintainers <maintainers@mcp-sampling.invalid>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "eBPF agent for sampled tracing of functions, syscalls and CUDA launches")
# Extended description: lines of at most 80 characters (lintian); CPack starts each with the
# space the control file needs.
string(CONCAT CPACK_PACKAGE_DESCRIPTION
    "mcp-agent samples user functions (uprobes), syscalls and CUDA kernel\n"
    "launches in the kernel, so untraced events never reach userspace, and\n"
    "streams the kept events over gRPC to mcp-broker, which consumers\n"
    "subscribe to by service, tags and sampling rate.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://github.com/mcp-sampling/mcp-sampling")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${CMAKE_BINARY_DIR}/packaging/deb/conffiles
    ${MCP_PKG_DIR}/deb/postinst ${MCP_PKG_DIR}/deb/prerm ${MCP_PKG_DIR}/deb/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION TRUE)
# Dependencies: computed from the binaries by dpkg-shlibdeps (dpkg-dev, in scripts/setup)
# so they always match what was linked; the fixed list is the bookworm fallback.
find_program(MCP_DPKG_SHLIBDEPS dpkg-shlibdeps)
if(MCP_DPKG_SHLIBDEPS)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
else()
  set(CPACK_DEBIAN_PACKAGE_DEPENDS
      "libbpf1, libelf1, zlib1g, libcap2, libgrpc++1.51, libgrpc29, libprotobuf32, libyaml-cpp0.7, libcpp-httplib0.11, libprometheus-cpp-core1.0, libspdlog1.10, libfmt9, libssl3, libstdc++6, libc6")
endif()
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "systemd")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "bpftool")

include(CPack)
