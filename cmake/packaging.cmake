# CPack: one Debian package, mcp-sampling, with both binaries, the systemd units, the
# default agent configuration (a conffile that works on any host), the annotated example
# (/usr/share/doc/mcp-sampling/examples/agent.yaml) and the deployment docs.
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
install(DIRECTORY ${MCP_PKG_DIR}/k8s/ DESTINATION share/doc/mcp-sampling/k8s FILES_MATCHING PATTERN "*.yaml")

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME mcp-sampling)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "mcp-sampling")
set(CPACK_PACKAGE_CONTACT "mcp-sampling maintainers <maintainers@mcp-sampling.invalid>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "eBPF node agent for sampled tracing of functions, syscalls and CUDA launches")
set(CPACK_PACKAGE_DESCRIPTION
    "mcp-agent samples uprobes, syscalls and CUDA kernel launches in the kernel and streams the\n kept events over gRPC to mcp-broker, which consumers subscribe to.")
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
