// A USDT site's argument specs ("-4@%edi 8@-16(%rbp) 4@$7", x86-64 only) as the spec record
// libbpf's usdt.bpf.h reads (struct __bpf_usdt_spec in __bpf_usdt_specs): what the agent
// writes when it attaches USDT probes itself (one uprobe_multi link per probe, each site's
// cookie its spec's index). The specs come from the traced file: untrusted, so anything
// but a size of 1, 2, 4 or 8 bytes with a register, a register-relative address or a
// constant is refused with the reason, never guessed.
#pragma once
#include <cstdint>
#include <string>

namespace mcp::loader {

// Mirrors of usdt.bpf.h's structs (libbpf 1.x; checked by size in usdt_spec.cpp).
struct UsdtArgSpec {
  uint64_t val_off = 0;   // constant, or the offset added to the register for a deref
  uint32_t arg_type = 0;  // enum __bpf_usdt_arg_type
  int16_t reg_off = 0;    // offsetof(struct pt_regs, register)
  bool arg_signed = false;
  int8_t arg_bitshift = 0;  // 64 - size in bits
};
inline constexpr int kUsdtMaxArgs = 12;  // BPF_USDT_MAX_ARG_CNT
struct UsdtSpec {
  UsdtArgSpec args[kUsdtMaxArgs];
  uint64_t usdt_cookie = 0;
  int16_t arg_cnt = 0;
};

// The spec of one site whose arguments read `specs`, carrying `cookie`. Throws mcp::Error
// (runtime) naming the argument it cannot read.
UsdtSpec parse_usdt_spec(const std::string& specs, uint64_t cookie);

}  // namespace mcp::loader
