// Owning handles (common/unique_handle.h) of the libbpf objects a session holds, usable in
// headers that do not include libbpf: each is freed when its owner goes.
#pragma once
#include "common/unique_handle.h"

struct bpf_link;
struct ring_buffer;
struct mcp_bpf;

namespace mcp::loader {

void free_bpf_link(bpf_link* link);       // bpf_link__destroy: detaches
void free_ring_buffer(ring_buffer* ring);  // ring_buffer__free
void free_skeleton(mcp_bpf* skel);         // mcp_bpf__destroy: programs and maps

using BpfLinkHandle = UniqueHandle<bpf_link*, free_bpf_link>;
using RingBufferHandle = UniqueHandle<ring_buffer*, free_ring_buffer>;
using SkeletonHandle = UniqueHandle<mcp_bpf*, free_skeleton>;

}  // namespace mcp::loader
