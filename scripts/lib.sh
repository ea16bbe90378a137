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
mcp_build() {
  cmake -S "$MCP_ROOT" -B "$MCP_ROOT/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$MCP_ROOT/build" -j"$(nproc)"
}
