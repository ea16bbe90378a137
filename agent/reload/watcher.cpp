#include "reload/watcher.h"

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

#include <spdlog/spdlog.h>

#include "common/error.h"

namespace mcp::reload {

namespace {

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

void poke(int fd) noexcept {
  const uint64_t one = 1;
  const int saved = errno;
  ssize_t r = write(fd, &one, sizeof one);
  (void)r;
  errno = saved;
}

void drain(int fd) {
  uint64_t v;
  ssize_t r = read(fd, &v, sizeof v);
  (void)r;
}

std::atomic<int> g_sighup_fd{-1};

void on_sighup(int) {
  const int fd = g_sighup_fd.load(std::memory_order_relaxed);
  if (fd >= 0) poke(fd);
}

}  // namespace

ConfigWatcher::ConfigWatcher(std::filesystem::path config_file, Callback on_change, Options options)
    : on_change_(std::move(on_change)), options_(options) {
  dir_ = std::filesystem::absolute(config_file).parent_path();
  inotify_fd_ = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (inotify_fd_ < 0) throw mcp::runtime_error(errno_text("inotify_init1"));
  const uint32_t mask = IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_ATTRIB | IN_ONLYDIR;
  if (inotify_add_watch(inotify_fd_, dir_.c_str(), mask) < 0) {
    const std::string msg = errno_text(("watch " + dir_.string()).c_str());
    close(inotify_fd_);
    throw mcp::runtime_error(msg);
  }
  trigger_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  stop_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (trigger_fd_ < 0 || stop_fd_ < 0) {
    close(inotify_fd_);
    if (trigger_fd_ >= 0) close(trigger_fd_);
    if (stop_fd_ >= 0) close(stop_fd_);
    throw mcp::runtime_error(errno_text("eventfd"));
  }
  thread_ = std::thread([this] { run(); });
}

ConfigWatcher::~ConfigWatcher() {
  int expected = trigger_fd_;
  g_sighup_fd.compare_exchange_strong(expected, -1);
  poke(stop_fd_);
  if (thread_.joinable()) thread_.join();
  close(inotify_fd_);
  close(trigger_fd_);
  close(stop_fd_);
}

void ConfigWatcher::trigger() noexcept { poke(trigger_fd_); }

// Kubelet bookkeeping entries (`..2026_..`, `..data_tmp`) are noise; `..data` is the swap
// itself. Editor swap and backup files are noise too.
bool ConfigWatcher::relevant(std::string_view name) {
  if (name.empty()) return true;
  if (name == "..data") return true;
  if (name.starts_with("..")) return false;
  if (name.ends_with("~") || name.ends_with(".swp") || name.ends_with(".swx") || name == "4913") return false;
  return true;
}

void ConfigWatcher::run() {
  using Clock = std::chrono::steady_clock;
  bool pending = false;
  bool forced = false;
  Clock::time_point deadline{};
  alignas(inotify_event) char buf[16 * 1024];
  for (;;) {
    int timeout = -1;
    if (pending) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      timeout = left > 0 ? static_cast<int>(left) : 0;
    }
    pollfd fds[3] = {{stop_fd_, POLLIN, 0}, {inotify_fd_, POLLIN, 0}, {trigger_fd_, POLLIN, 0}};
    const int n = poll(fds, 3, timeout);
    if (n < 0 && errno != EINTR) {
      spdlog::error("config watcher: poll: {}", std::strerror(errno));
      return;
    }
    if (n > 0 && (fds[0].revents & POLLIN)) return;
    if (n > 0 && (fds[1].revents & POLLIN)) {
      bool any = false;
      for (;;) {
        const ssize_t len = read(inotify_fd_, buf, sizeof buf);
        if (len <= 0) break;
        for (ssize_t off = 0; off < len;) {
          const auto* ev = reinterpret_cast<const inotify_event*>(buf + off);
          off += static_cast<ssize_t>(sizeof(inotify_event) + ev->len);
          if (ev->mask & IN_IGNORED) {
            spdlog::warn("config watcher: {} is no longer watched (removed?); use SIGHUP to reload", dir_.string());
            continue;
          }
          const std::string_view name = ev->len ? std::string_view(ev->name) : std::string_view();
          if (relevant(name)) any = true;
        }
      }
      if (any) {
        pending = true;
        deadline = Clock::now() + options_.debounce;
      }
    }
    if (n > 0 && (fds[2].revents & POLLIN)) {
      drain(trigger_fd_);
      pending = true;
      forced = true;
      deadline = Clock::now();
    }
    if (pending && Clock::now() >= deadline) {
      const Trigger t = forced ? Trigger::kForced : Trigger::kFileEvent;
      pending = forced = false;
      try {
        on_change_(t);
      } catch (const std::exception& e) {
        spdlog::error("config watcher: reload callback failed: {}", e.what());
      }
    }
  }
}

void install_sighup_trigger(ConfigWatcher& watcher) {
  g_sighup_fd.store(watcher.trigger_fd_);
  struct sigaction sa {};
  sa.sa_handler = on_sighup;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  if (sigaction(SIGHUP, &sa, nullptr) != 0) throw mcp::runtime_error(errno_text("sigaction(SIGHUP)"));
}

void remove_sighup_trigger() {
  g_sighup_fd.store(-1);
  signal(SIGHUP, SIG_DFL);
}

}  // namespace mcp::reload
