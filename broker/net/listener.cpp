#include "broker/net/listener.h"

#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include <spdlog/spdlog.h>

#include "common/error.h"

namespace mcp::broker {
namespace {

size_t fd_limit() {
  rlimit l{};
  if (getrlimit(RLIMIT_NOFILE, &l) != 0 || l.rlim_cur == RLIM_INFINITY) return SIZE_MAX;
  return static_cast<size_t>(l.rlim_cur);
}

void close_all(std::vector<int>& fds) {
  for (int fd : fds) ::close(fd);
  fds.clear();
}

}  // namespace

size_t open_descriptors() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  size_t n = 0;
  while (const dirent* e = ::readdir(dir)) n += e->d_name[0] != '.';
  ::closedir(dir);
  return n > 0 ? n - 1 : 0;  // not the directory's own
}

size_t descriptor_reserve(size_t limit) { return std::clamp<size_t>(limit / 8, 32, 1024); }

ListenerHealth descriptor_health() {
  const size_t limit = fd_limit();
  if (limit == SIZE_MAX) return {};
  const size_t open = open_descriptors();
  if (open + descriptor_reserve(limit) <= limit) return {};
  return {false, "refusing new connections: " + std::to_string(open) + " of " + std::to_string(limit) +
                     " descriptors open, " + std::to_string(descriptor_reserve(limit)) +
                     " kept for the broker's own files (idle or too many connections)"};
}

Listener::Listener(const std::string& listen) {
  const auto colon = listen.rfind(':');
  if (colon == std::string::npos) throw runtime_error("cannot listen on " + listen + ": expected HOST:PORT");
  std::string host = listen.substr(0, colon);
  const std::string service = listen.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found); rc != 0)
    throw runtime_error("cannot listen on " + listen + ": " + ::gai_strerror(rc));
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, ::freeaddrinfo);
  bool has_v4 = false;
  for (const addrinfo* a = found; a; a = a->ai_next) has_v4 |= a->ai_family == AF_INET;
  for (const addrinfo* a = found; a; a = a->ai_next) {
    if (a->ai_family != AF_INET && a->ai_family != AF_INET6) continue;
    sockaddr_storage addr{};
    std::memcpy(&addr, a->ai_addr, a->ai_addrlen);
    if (port_ != 0) {  // port 0: the first address's free port for every address, as gRPC does
      if (a->ai_family == AF_INET) reinterpret_cast<sockaddr_in*>(&addr)->sin_port = htons(static_cast<uint16_t>(port_));
      else reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port = htons(static_cast<uint16_t>(port_));
    }
    const int fd = ::socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    const int one = 1;
    // "[::]" alone also serves IPv4, as gRPC's does; beside an IPv4 address, IPv6 only.
    const int v6only = has_v4 ? 1 : 0;
    const bool ok = fd >= 0 && ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
                    (a->ai_family != AF_INET6 || ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof v6only) == 0) &&
                    ::bind(fd, reinterpret_cast<sockaddr*>(&addr), a->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0;
    if (!ok) {
      const std::string why = std::strerror(errno);
      if (fd >= 0) ::close(fd);
      close_all(fds_);
      throw runtime_error("cannot listen on " + listen + ": " + why);
    }
    fds_.push_back(fd);
    if (port_ == 0) {
      socklen_t len = sizeof addr;
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
      port_ = ntohs(addr.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&addr)->sin_port
                                              : reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
    }
  }
  if (fds_.empty()) throw runtime_error("cannot listen on " + listen + ": no IPv4 or IPv6 address");
  wake_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_ < 0) {
    const std::string why = std::strerror(errno);
    close_all(fds_);
    throw runtime_error("cannot listen on " + listen + ": eventfd: " + why);
  }
}

Listener::~Listener() {
  stop();
  if (wake_ >= 0) ::close(wake_);
}

void Listener::start(HandOff hand_off) {
  hand_off_ = std::move(hand_off);
  thread_ = std::thread([this] { run(); });
}

void Listener::stop() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    (void)!::write(wake_, &one, sizeof one);
    thread_.join();
  }
  close_all(fds_);
}

void Listener::run() {
  std::vector<pollfd> polled;
  for (int fd : fds_) polled.push_back({fd, POLLIN, 0});
  polled.push_back({wake_, POLLIN, 0});
  int pause_ms = -1;  // after a failed accept(): the pending connections wait in the backlog
  for (;;) {
    if (::poll(polled.data(), polled.size(), pause_ms) < 0 && errno != EINTR) break;
    if (polled.back().revents != 0) break;
    pause_ms = -1;
    for (size_t i = 0; i + 1 < polled.size(); ++i) {
      for (;;) {  // the whole backlog: the listening sockets are non-blocking
        const int fd = ::accept4(polled[i].fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
          if (admit(fd)) hand_off_(polled[i].fd, fd);
          continue;
        }
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
          failed(errno);
          pause_ms = 100;
        }
        break;
      }
    }
  }
}

// Refuses (closes) the connection while this process holds more than its limit less the
// reserve; takes it otherwise.
bool Listener::admit(int fd) {
  const size_t limit = fd_limit();
  const size_t open = limit == SIZE_MAX ? 0 : open_descriptors();
  if (limit != SIZE_MAX && open + descriptor_reserve(limit) > limit) {
    ::close(fd);
    // The first and every 1000th: a flood must not fill the log too.
    if (refused_++ % 1000 == 0)
      spdlog::warn("refusing connections: {} of {} descriptors open, {} kept for the broker's own files "
                   "({} refused so far)", open, limit, descriptor_reserve(limit), refused_.load());
    return false;
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // gRPC sets it on its own
  std::lock_guard lock(mu_);
  accept_error_.clear();
  return true;
}

void Listener::failed(int error) {
  std::lock_guard lock(mu_);
  if (accept_error_.empty()) spdlog::warn("accept(): {}; retrying", std::strerror(error));
  accept_error_ = std::strerror(error);
  accept_error_at_ = std::chrono::steady_clock::now();
}

ListenerHealth Listener::health() const {
  if (ListenerHealth h = descriptor_health(); !h.ok) return h;
  std::lock_guard lock(mu_);
  // A failure counts until an accept() succeeds, or for 5 s when nobody connects since.
  if (!accept_error_.empty() && std::chrono::steady_clock::now() - accept_error_at_ < std::chrono::seconds(5))
    return {false, "cannot accept connections: " + accept_error_};
  return {};
}

}  // namespace mcp::broker
