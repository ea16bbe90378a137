#include "loader/bpf_handles.h"

#include <bpf/libbpf.h>

#include "mcp_bpf.skel.h"

namespace mcp::loader {

void free_bpf_link(bpf_link* link) { bpf_link__destroy(link); }
void free_ring_buffer(ring_buffer* ring) { ring_buffer__free(ring); }
void free_skeleton(mcp_bpf* skel) { mcp_bpf__destroy(skel); }

}  // namespace mcp::loader
