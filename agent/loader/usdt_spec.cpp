#include "loader/usdt_spec.h"

#include <array>
#include <cerrno>
#include <cstdlib>
#include <sstream>
#include <string_view>

#include "common/error.h"

namespace mcp::loader {
namespace {

static_assert(sizeof(UsdtArgSpec) == 16, "struct __bpf_usdt_arg_spec layout");
static_assert(sizeof(UsdtSpec) == 12 * 16 + 16, "struct __bpf_usdt_spec layout");

enum : uint32_t { kArgConst = 0, kArgReg = 1, kArgRegDeref = 2 };  // enum __bpf_usdt_arg_type

// x86-64 struct pt_regs, in its order: each register with the names of its narrower parts.
struct Register {
  int16_t offset;
  std::array<std::string_view, 4> names;
};
constexpr Register kRegisters[] = {
    {0, {"r15", "r15d", "r15w", "r15b"}}, {8, {"r14", "r14d", "r14w", "r14b"}},
    {16, {"r13", "r13d", "r13w", "r13b"}}, {24, {"r12", "r12d", "r12w", "r12b"}},
    {32, {"rbp", "ebp", "bp", "bpl"}},     {40, {"rbx", "ebx", "bx", "bl"}},
    {48, {"r11", "r11d", "r11w", "r11b"}}, {56, {"r10", "r10d", "r10w", "r10b"}},
    {64, {"r9", "r9d", "r9w", "r9b"}},     {72, {"r8", "r8d", "r8w", "r8b"}},
    {80, {"rax", "eax", "ax", "al"}},      {88, {"rcx", "ecx", "cx", "cl"}},
    {96, {"rdx", "edx", "dx", "dl"}},      {104, {"rsi", "esi", "si", "sil"}},
    {112, {"rdi", "edi", "di", "dil"}},    {128, {"rip", "eip", "", ""}},
    {152, {"rsp", "esp", "sp", "spl"}},
};

int16_t register_offset(std::string_view name, const std::string& arg) {
  for (const auto& r : kRegisters)
    for (auto n : r.names)
      if (!n.empty() && n == name) return r.offset;
  throw runtime_error("USDT argument '" + arg + "': unknown register %" + std::string(name));
}

// Whether `s` is a whole signed decimal number (into `out`).
bool whole_number(std::string_view s, int64_t& out) {
  if (s.empty()) return false;
  const std::string text(s);
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno || end != text.c_str() + text.size()) return false;
  out = v;
  return true;
}

UsdtArgSpec parse_arg(const std::string& arg) {
  const auto at = arg.find('@');
  int64_t size = 0;
  if (at == std::string::npos || !whole_number(std::string_view(arg).substr(0, at), size))
    throw runtime_error("USDT argument '" + arg + "': not SIZE@LOCATION");
  const int64_t bytes = size < 0 ? -size : size;
  if (bytes != 1 && bytes != 2 && bytes != 4 && bytes != 8)
    throw runtime_error("USDT argument '" + arg + "': size " + std::to_string(size) + " is not 1, 2, 4 or 8 bytes");
  UsdtArgSpec spec;
  spec.arg_signed = size < 0;
  spec.arg_bitshift = static_cast<int8_t>(64 - bytes * 8);
  const std::string_view where = std::string_view(arg).substr(at + 1);
  int64_t value = 0;
  if (!where.empty() && where[0] == '$') {  // 4@$7: a constant
    if (!whole_number(where.substr(1), value)) throw runtime_error("USDT argument '" + arg + "': bad constant");
    spec.arg_type = kArgConst;
    spec.val_off = static_cast<uint64_t>(value);
  } else if (!where.empty() && where[0] == '%') {  // 8@%rax: a register
    spec.arg_type = kArgReg;
    spec.reg_off = register_offset(where.substr(1), arg);
  } else {  // -4@-16(%rbp) or 8@(%rdi): memory at a register plus an offset
    const auto open = where.find('(');
    if (open == std::string_view::npos || where.size() < open + 3 || where[open + 1] != '%' || where.back() != ')')
      throw runtime_error("USDT argument '" + arg + "': unsupported location (not $N, %REG or N(%REG))");
    if (open > 0 && !whole_number(where.substr(0, open), value))
      throw runtime_error("USDT argument '" + arg + "': bad offset (a symbol-relative address is not supported)");
    spec.arg_type = kArgRegDeref;
    spec.val_off = static_cast<uint64_t>(value);
    spec.reg_off = register_offset(where.substr(open + 2, where.size() - open - 3), arg);
  }
  return spec;
}

}  // namespace

UsdtSpec parse_usdt_spec(const std::string& specs, uint64_t cookie) {
  UsdtSpec out;
  out.usdt_cookie = cookie;
  std::istringstream in(specs);
  for (std::string arg; in >> arg;) {
    if (out.arg_cnt == kUsdtMaxArgs)
      throw runtime_error("USDT site with more than " + std::to_string(kUsdtMaxArgs) + " arguments: " + specs);
    out.args[out.arg_cnt++] = parse_arg(arg);
  }
  return out;
}

}  // namespace mcp::loader
