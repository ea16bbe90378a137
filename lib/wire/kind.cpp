#include "wire/kind.h"

namespace mcp::wire {
namespace {

struct Row {
  EventKind kind;
  mcp::v1::EventKind wire;
};
constexpr Row kKinds[] = {
    {EventKind::kUprobe, mcp::v1::EVENT_KIND_UPROBE},   {EventKind::kUretprobe, mcp::v1::EVENT_KIND_URETPROBE},
    {EventKind::kSyscall, mcp::v1::EVENT_KIND_SYSCALL}, {EventKind::kCuda, mcp::v1::EVENT_KIND_CUDA},
    {EventKind::kUsdt, mcp::v1::EVENT_KIND_USDT},
};

}  // namespace

mcp::v1::EventKind kind_to_wire(EventKind kind) {
  for (const Row& r : kKinds)
    if (r.kind == kind) return r.wire;
  return mcp::v1::EVENT_KIND_UNSPECIFIED;
}

std::optional<EventKind> kind_from_wire(int kind) {
  for (const Row& r : kKinds)
    if (r.wire == kind) return r.kind;
  return std::nullopt;
}

std::optional<EventKind> kind_from_name(std::string_view name) {
  for (const Row& r : kKinds)
    if (to_string(r.kind) == name) return r.kind;
  return std::nullopt;
}

std::string_view kind_name(int kind) {
  const auto k = kind_from_wire(kind);
  return k ? to_string(*k) : std::string_view();
}

}  // namespace mcp::wire
