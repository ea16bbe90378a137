// UniqueHandle: sole owner of one handle of a C API (a descriptor, a libbpf object), freed by
// `Free` when the owner goes, like std::unique_ptr but for handles that are not pointers.
// None is kNone, or for an integer handle any negative value (a failed call's -1, or the
// -errno libbpf returns), which is never freed. Move-only; a moved-from handle holds none.
#pragma once
#include <unistd.h>

#include <type_traits>
#include <utility>

namespace mcp {

template <class T, auto Free, T kNone = T{}>
class UniqueHandle {
 public:
  UniqueHandle() = default;
  explicit UniqueHandle(T handle) : handle_(handle) {}
  ~UniqueHandle() { reset(); }
  UniqueHandle(UniqueHandle&& other) noexcept : handle_(other.release()) {}
  UniqueHandle& operator=(UniqueHandle&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueHandle(const UniqueHandle&) = delete;
  UniqueHandle& operator=(const UniqueHandle&) = delete;

  T get() const { return handle_; }
  explicit operator bool() const { return held(handle_); }
  // Gives the handle up unfreed.
  T release() { return std::exchange(handle_, kNone); }
  // Frees the handle held (if any) and holds `handle`.
  void reset(T handle = kNone) {
    if (T old = std::exchange(handle_, handle); held(old)) Free(old);
  }

 private:
  static bool held(T handle) {
    if constexpr (std::is_integral_v<T>) return handle >= 0;
    else return handle != kNone;
  }

  T handle_ = kNone;
};

// A file descriptor, closed when it goes.
using UniqueFd = UniqueHandle<int, ::close, -1>;

}  // namespace mcp
