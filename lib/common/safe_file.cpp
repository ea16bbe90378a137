#include "common/safe_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include <fmt/format.h>

#include "common/error.h"

namespace mcp {
namespace {

bool trusted_owner(uid_t uid) { return uid == 0 || uid == ::geteuid(); }

// Why another user could plant links in the directory `st` describes; empty when nobody can.
std::string unsafe_reason(const struct stat& st) {
  if (!trusted_owner(st.st_uid))
    return fmt::format("it is owned by uid {}, who can plant links where we write (use a directory owned by root "
                       "or uid {})", st.st_uid, ::geteuid());
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX))
    return fmt::format("it is writable by group or others without the sticky bit (mode {:04o}), so another user can "
                       "plant links where we write (chmod go-w)", st.st_mode & 07777);
  return {};
}

}  // namespace

SafeDir::SafeDir(const std::filesystem::path& dir, std::string_view what) : path_(dir) {
  const auto refuse = [&](const std::string& why) {
    return runtime_error(fmt::format("{}: refusing directory {}: {}", what, dir.string(), why));
  };
  struct stat st {};
  // The name itself may be a link (an operator's /var/spool/mcp -> /data/mcp), but not one
  // that somebody else made: they could point it anywhere.
  if (::lstat(dir.c_str(), &st) == 0 && S_ISLNK(st.st_mode) && !trusted_owner(st.st_uid))
    throw refuse(fmt::format("it is a symbolic link owned by uid {}", st.st_uid));
  fd_.reset(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd_) throw runtime_error(fmt::format("{}: cannot open directory {}: {}", what, dir.string(), std::strerror(errno)));
  std::string why = ::fstat(fd_.get(), &st) == 0 ? unsafe_reason(st) : std::strerror(errno);
  if (!why.empty()) {
    fd_.reset();
    throw refuse(why);
  }
}

int SafeDir::open(const std::string& name, int flags, mode_t mode) const {
  return ::openat(fd_.get(), name.c_str(), flags | O_NOFOLLOW | O_CLOEXEC, mode);
}

std::string SafeDir::write_temporary(const std::string& name, std::string_view text, mode_t mode) const {
  // A name nobody can guess, created only if absent: a link planted in advance is never
  // written through (a fixed NAME.tmp could be one).
  std::random_device rd;
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 8 && fd < 0; attempt++) {
    tmp = fmt::format(".{}.{:08x}{:08x}.tmp", name, rd(), rd());
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, mode);
    if (fd < 0 && errno != EEXIST) return {};
  }
  if (fd < 0) return {};
  bool ok = ::fchmod(fd, mode) == 0;  // the umask would narrow it
  for (size_t done = 0; ok && done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = ENOSPC;
      ok = false;
      break;
    }
    done += static_cast<size_t>(n);
  }
  ok = ok && ::fsync(fd) == 0;
  int err = errno;
  if (::close(fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (ok) return tmp;
  ::unlinkat(fd_.get(), tmp.c_str(), 0);
  errno = err;
  return {};
}

bool SafeDir::settle(const std::string& tmp, const std::string& name, bool keep_existing) const {
  const bool ok = keep_existing ? ::linkat(fd_.get(), tmp.c_str(), fd_.get(), name.c_str(), 0) == 0
                                : ::renameat(fd_.get(), tmp.c_str(), fd_.get(), name.c_str()) == 0;
  const int err = errno;
  if (!ok || keep_existing) ::unlinkat(fd_.get(), tmp.c_str(), 0);
  errno = err;
  return ok;
}

bool SafeDir::replace(const std::string& name, std::string_view text, mode_t mode) const {
  const std::string tmp = write_temporary(name, text, mode);
  return !tmp.empty() && settle(tmp, name, false);
}

bool SafeDir::create(const std::string& name, std::string_view text, mode_t mode) const {
  const std::string tmp = write_temporary(name, text, mode);
  return !tmp.empty() && settle(tmp, name, true);
}

bool SafeDir::remove(const std::string& name) const { return ::unlinkat(fd_.get(), name.c_str(), 0) == 0; }

std::string open_error_text(int err) {
  if (err == ELOOP) return "a symbolic link is there, and links are not followed here";
  return std::strerror(err);
}

bool read_whole(int fd, std::string* out) {
  out->clear();
  char buf[65536];
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, at);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) return true;
    out->append(buf, static_cast<size_t>(n));
    at += n;
  }
}

}  // namespace mcp
