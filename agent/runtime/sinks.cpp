#include "runtime/sinks.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/error.h"
#include "runtime/runtime.h"

namespace mcp::runtime {

StreamFileSink::StreamFileSink(const StreamSpec& spec) {
  fd_ = STDOUT_FILENO;
  if (!spec.path.empty()) {
    fd_ = open(spec.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) throw runtime_error("cannot open " + spec.path + ": " + std::strerror(errno));
    owns_fd_ = true;
  }
  stream_ = std::make_unique<output::StreamSink>(output::make_formatter(spec.format), fd_);
}

StreamFileSink::~StreamFileSink() {
  if (owns_fd_) close(fd_);
}

bool StreamFileSink::drain(std::chrono::milliseconds, const std::function<bool()>&) {
  stream_->flush();
  if (owns_fd_) {
    close(fd_);
    owns_fd_ = false;
  }
  return true;
}

bool BrokerSink::drain(std::chrono::milliseconds limit, const std::function<bool()>& give_up) {
  // Most runs are acknowledged at once; only a slow or absent broker earns the message.
  const auto first = std::min(limit, std::chrono::milliseconds(200));
  if (forwarder_->drain(first, give_up)) return true;
  if (give_up() || limit <= first || !forwarder_->refused().empty()) return false;  // refused: waiting cannot help
  const auto s = forwarder_->stats();
  fprintf(stderr, "mcp-agent: waiting up to %lld s for the broker to acknowledge %llu events (Ctrl-C again to stop)\n",
          static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(limit).count()),
          static_cast<unsigned long long>(s.queued + s.unacked));
  return forwarder_->drain(limit - first, give_up);
}

SinkReport BrokerSink::report() const {
  const auto s = forwarder_->stats();
  SinkReport r;
  char line[512];
  snprintf(line, sizeof(line),
           "forwarder: broker %s, sent %llu, acked %llu, spooled %llu bytes, dropped %llu, unreadable %llu, "
           "errors %llu",
           s.broker.c_str(), (unsigned long long)s.sent, (unsigned long long)s.acked,
           (unsigned long long)s.spooled_bytes, (unsigned long long)s.dropped_oldest,
           (unsigned long long)s.unreadable_events, (unsigned long long)s.forward_errors);
  r.summary = line;
  const Undelivered u = undelivered_of(s);
  r.undelivered = u.describe();
  r.lost = u.lost + (u.spool_dir.empty() ? u.pending : 0);
  r.kept = u.spool_dir.empty() ? 0 : u.pending;
  return r;
}

}  // namespace mcp::runtime
