// StackSymbolizer: turns the stacks the kernel took (Event::captured_stack) into named frames
// (Event::stack) and their text form, the attribute code.stacktrace (OpenTelemetry's name).
//  - user frames: the file by the frame's build id (known from the probes' files and from the
//    mappings of every process read so far), else by the process's mappings, then the function
//    from the file's .symtab or .dynsym (C++ demangled) at the frame's offset in the file;
//  - kernel frames: /proc/kallsyms;
//  - a frame that cannot be named is "[unknown]", never a guess: with a build id but no file
//    it keeps "build-id:HEX" and the offset, so a process that exited still gets module+offset.
// Bounded: at most `files` symbol tables and `processes` process mappings are kept (least
// recently used go first); everything read from a traced process is untrusted and only
// bounds-checked lookups are made with it. One thread (the consumer's).
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/event.h"
#include "loader/elf_symbols.h"
#include "loader/proc_maps.h"

namespace mcp::symbolize {

class StackSymbolizer {
 public:
  struct Limits {
    size_t files = 128;        // symbol tables held
    size_t processes = 1024;   // process mappings held
    size_t build_ids = 16384;  // build id -> file entries
  };
  explicit StackSymbolizer(Limits limits);
  StackSymbolizer() : StackSymbolizer(Limits{}) {}

  // Names e.captured_stack into e.stack (kernel frames first, innermost first) and adds the
  // attribute code.stacktrace; nothing when there is no stack.
  void symbolize(Event& e);
  // A file whose build id stays known after every process that maps it is gone (a probe's).
  void add_file(const std::string& path);
  // The text form: one "sym+0xOFF (module)" line per frame.
  static std::string render(const std::vector<StackFrame>& frames);

 private:
  struct KernelSymbol {
    uint64_t addr;
    std::string name;
    std::string module;  // "[kernel]" or "[module]"
  };
  StackFrame kernel_frame(uint64_t ip);
  StackFrame user_frame(pid_t pid, uint64_t ip, const CapturedStack::BuildIdFrame& id);
  // The file `path` holds at `file_offset` as a frame (sym "[unknown]" when not in a symbol).
  StackFrame frame_in_file(const std::string& path, const std::string& shown, uint64_t ip, uint64_t file_offset);
  const std::vector<loader::Mapping>* mappings_of(pid_t pid, bool refresh);
  std::shared_ptr<const loader::ElfSymbols> symbols_of(const std::string& path);
  void remember_build_id(const std::string& hex, const std::string& path, const std::string& shown);
  void load_kallsyms();

  Limits limits_;
  // build id hex -> (file to open, path to show)
  std::unordered_map<std::string, std::pair<std::string, std::string>> by_build_id_;
  // LRU of symbol tables by the path opened
  std::list<std::pair<std::string, std::shared_ptr<const loader::ElfSymbols>>> files_;
  std::unordered_map<std::string, decltype(files_)::iterator> file_index_;
  // LRU of process mappings; a pid is re-read once when an address is outside them
  struct Process {
    pid_t pid;
    std::vector<loader::Mapping> maps;
  };
  std::list<Process> processes_;
  std::unordered_map<pid_t, std::list<Process>::iterator> process_index_;
  // (dev, inode) -> (the file as the agent opens it, its build id)
  std::unordered_map<uint64_t, std::pair<std::string, std::string>> inode_build_ids_;
  std::vector<KernelSymbol> kallsyms_;  // sorted by addr
  bool kallsyms_loaded_ = false;
};

}  // namespace mcp::symbolize
