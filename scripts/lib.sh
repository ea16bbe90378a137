# Shared by the scripts: become root (BPF needs it) and locate the repo.
MCP_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mcp_need_root() {
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
      exec sudo -E "$0" "$@"
    fi
    echo "$(basename "$0"): needs root (BPF programs are loaded); run it as root" >&2
    exit 1
  fi
}
# Ninja for a new build folder (one that exists keeps its generator). -g1, not -g: full debug
# information made the heaviest test files compile 1.5x slower (broker_e2e_test.cpp: 44 s against
# 28 s), a third of CI's build; -g1 keeps functions and line tables, so backtraces still name the
# line. BPF objects are built with their own -g (BTF needs it).
mcp_build() {
  local generator=()
  [ -f "$MCP_ROOT/build/CMakeCache.txt" ] || generator=(-G Ninja)
  cmake -S "$MCP_ROOT" -B "$MCP_ROOT/build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" >/dev/null
  cmake --build "$MCP_ROOT/build" -j"$(nproc)"
}
