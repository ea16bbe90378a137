// Files this process creates in a directory an operator names (the forwarder's spool, the
// audit trail, the ready file). The agent runs as root and fs.protected_symlinks may be 0:
// whoever else can write in such a directory can plant a link at the name root is about to
// write, and root writes through it (issue 51). So:
// - SafeDir refuses a directory, with one line naming it and why, that another user can
//   plant links in: owned by a user other than root or this process's, or writable by group
//   or others without the sticky bit (a sticky directory of root's or ours, like /tmp, is
//   accepted: there nobody else can rename or remove our files, and the rules below keep
//   their links out of our way), or named through a symlink another user owns.
// - Files are opened relative to the directory's descriptor with O_NOFOLLOW: a link at the
//   name is an error (ELOOP), never followed. Checked and used through one descriptor, so a
//   directory swapped after the check is not the one written.
// - A file written whole is written to a new temporary (O_EXCL, a random name nobody can
//   plant in advance), then renamed over the name (a link there is replaced, not followed) or
//   linked to it (an existing name is kept).
#pragma once
#include <sys/types.h>

#include <filesystem>
#include <string>
#include <string_view>

#include "common/unique_handle.h"

namespace mcp {

class SafeDir {
 public:
  SafeDir() = default;  // none: every call fails with EBADF
  // Opens `dir` and checks it (above). Throws mcp::Error (runtime) "WHAT: refusing DIR: why".
  SafeDir(const std::filesystem::path& dir, std::string_view what);
  SafeDir(SafeDir&& other) noexcept = default;
  SafeDir& operator=(SafeDir&& other) noexcept = default;

  const std::filesystem::path& path() const { return path_; }
  int fd() const { return fd_.get(); }
  // openat(2) of `name` (one path component) with O_NOFOLLOW | O_CLOEXEC added: the new
  // descriptor, or -1 with errno (ELOOP: a link is there).
  int open(const std::string& name, int flags, mode_t mode = 0600) const;
  // Replaces `name` with `text` (temporary, fsync, rename): false with errno, no temporary left.
  bool replace(const std::string& name, std::string_view text, mode_t mode = 0600) const;
  // Creates `name` holding `text`, complete when it appears (temporary, fsync, link): false
  // with errno (EEXIST: it exists, left as it is), no temporary left.
  bool create(const std::string& name, std::string_view text, mode_t mode = 0600) const;
  // unlinkat(2): false with errno.
  bool remove(const std::string& name) const;

 private:
  // Writes `text` to a new temporary and returns its name; empty with errno on failure.
  std::string write_temporary(const std::string& name, std::string_view text, mode_t mode) const;
  // Moves the temporary to `name` (renameat, or linkat when `keep_existing`), then removes it.
  bool settle(const std::string& tmp, const std::string& name, bool keep_existing) const;

  std::filesystem::path path_;
  UniqueFd fd_;
};

// strerror(err), said plainly for the ELOOP of a link that O_NOFOLLOW refused.
std::string open_error_text(int err);
// The whole file behind `fd` from offset 0: false with errno on a read error.
bool read_whole(int fd, std::string* out);

}  // namespace mcp
