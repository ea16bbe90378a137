#include "spool/segment_log.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>
#include <sstream>

#include "common/error.h"
#include "common/safe_file.h"

namespace mcp {
namespace {

constexpr uint32_t kMagic = 0x3150434d;  // "MCP1" little-endian
constexpr size_t kHeaderBytes = 24;  // magic u32, length u32, offset u64, items u32, crc u32
constexpr uint32_t kMaxRecordBytes = 64u << 20;

uint64_t random_id() {
  std::random_device rd;
  uint64_t id = 0;
  while (id == 0) id = (uint64_t{rd()} << 32) | rd();
  return id;
}

template <typename T>
T load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

std::string segment_name(uint64_t first_offset) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%020llu.seg", static_cast<unsigned long long>(first_offset));
  return buf;
}

[[noreturn]] void fail(const std::string& what, const std::filesystem::path& path) {
  throw runtime_error("spool: " + what + " " + path.string() + ": " + open_error_text(errno));
}

}  // namespace

uint32_t crc32_of(std::string_view a, std::string_view b) {
  uLong crc = crc32(0L, Z_NULL, 0);
  crc = crc32(crc, reinterpret_cast<const Bytef*>(a.data()), static_cast<uInt>(a.size()));
  crc = crc32(crc, reinterpret_cast<const Bytef*>(b.data()), static_cast<uInt>(b.size()));
  return static_cast<uint32_t>(crc);
}

struct SegmentLog::Segment {
  struct Entry {
    uint64_t offset;
    uint64_t pos;  // of the payload
    uint32_t len;
    uint32_t items;
  };
  uint64_t first_offset = 0;
  std::filesystem::path path;  // empty in memory mode
  int fd = -1;
  std::string mem;             // memory mode: the segment's bytes
  std::vector<Entry> entries;
  uint64_t bytes = 0;
  bool sealed = false;  // a write failed: appends go to a new segment

  ~Segment() {
    if (fd >= 0) ::close(fd);
  }
  uint64_t last_offset() const { return entries.empty() ? 0 : entries.back().offset; }
};

SegmentLog::SegmentLog(SegmentLogOptions options) : options_(std::move(options)) {
  if (!options_.dir.empty()) {
    // Spooled events hold other users' arguments and command names: owner only.
    std::error_code ec;
    const bool created = std::filesystem::create_directories(options_.dir, ec);
    if (ec) throw runtime_error("spool: cannot create " + options_.dir.string() + ": " + ec.message());
    if (created) std::filesystem::permissions(options_.dir, std::filesystem::perms::owner_all, ec);
    dir_ = SafeDir(options_.dir, "spool");
    lock_directory();
    open_existing();
    load_meta(!segments_.empty());
  } else {
    id_ = random_id();
  }
  next_offset_ = std::max<uint64_t>(next_offset_, 1);
}

SegmentLog::~SegmentLog() {
  segments_.clear();
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
}

void SegmentLog::lock_directory() {
  const auto path = options_.dir / ".lock";
  lock_fd_ = dir_.open(".lock", O_RDWR | O_CREAT, 0600);
  if (lock_fd_ < 0) fail("cannot open", path);
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char pid[32] = {};
    const ssize_t n = ::pread(lock_fd_, pid, sizeof pid - 1, 0);
    ::close(lock_fd_);
    lock_fd_ = -1;
    if (err != EWOULDBLOCK) {
      errno = err;
      fail("cannot lock", path);
    }
    std::string holder(pid, n > 0 ? static_cast<size_t>(n) : 0);
    holder.erase(holder.find_last_not_of(" \n") + 1);
    throw runtime_error("spool: " + options_.dir.string() + " is in use by another process" +
                        (holder.empty() ? std::string() : " (pid " + holder + ")") +
                        "; each process needs its own directory");
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(lock_fd_, 0) == 0) (void)!::pwrite(lock_fd_, pid.data(), pid.size(), 0);
}

// log.meta: "id HEX\nnext N\n". A missing file in a directory with segments is an older
// version's log (clock-based offsets): id 0.
void SegmentLog::load_meta(bool had_segments) {
  const auto path = options_.dir / "log.meta";
  const int fd = dir_.open("log.meta", O_RDONLY);
  if (fd < 0 && errno != ENOENT) fail("cannot open", path);
  if (fd >= 0) {
    std::string text;
    const bool read = read_whole(fd, &text);
    ::close(fd);
    if (!read) fail("cannot read", path);
    std::istringstream in(text);
    std::string key, id_hex;
    uint64_t next = 0;
    if (!(in >> key >> id_hex) || key != "id" || !(in >> key >> next) || key != "next")
      throw runtime_error("spool: " + path.string() + " is damaged; move it away to start a new log");
    id_ = std::strtoull(id_hex.c_str(), nullptr, 16);
    next_offset_ = std::max(next_offset_, next);
    return;
  }
  id_ = had_segments ? 0 : random_id();
  next_offset_ = std::max<uint64_t>(next_offset_, 1);
  persist_meta();
}

bool SegmentLog::persist_meta() noexcept {
  if (options_.dir.empty()) return true;
  char text[64];
  const int len = std::snprintf(text, sizeof text, "id %016llx\nnext %llu\n",
                                static_cast<unsigned long long>(id_),
                                static_cast<unsigned long long>(next_offset_));
  return dir_.replace("log.meta", std::string_view(text, static_cast<size_t>(len)));
}

void SegmentLog::open_existing() {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(options_.dir)) {
    // A link is listed too, so that opening it (never through it) refuses it by name.
    if ((entry.is_regular_file() || entry.is_symlink()) && entry.path().extension() == ".seg")
      files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& path : files) {
    auto seg = std::make_unique<Segment>();
    seg->fd = dir_.open(path.filename(), O_RDWR | O_APPEND);
    if (seg->fd < 0) fail("cannot open", path);
    std::string data;
    if (!read_whole(seg->fd, &data)) fail("cannot read", path);
    seg->path = path;
    seg->first_offset = std::strtoull(path.stem().c_str(), nullptr, 10);
    seg->bytes = data.size();
    size_t pos = 0;
    bool in_corruption = false;
    while (pos + kHeaderBytes <= data.size()) {
      const char* h = data.data() + pos;
      const uint32_t len = load<uint32_t>(h + 4);
      const uint64_t offset = load<uint64_t>(h + 8);
      const bool fits = load<uint32_t>(h) == kMagic && len <= kMaxRecordBytes &&
                        pos + kHeaderBytes + len <= data.size();
      if (fits && load<uint32_t>(h + 20) ==
                      crc32_of(std::string_view(h + 8, 12),
                               std::string_view(h + kHeaderBytes, len)) &&
          offset >= next_offset_) {
        seg->entries.push_back({offset, pos + kHeaderBytes, len, load<uint32_t>(h + 16)});
        next_offset_ = offset + 1;
        last_offset_ = offset;
        pos += kHeaderBytes + len;
        in_corruption = false;
        continue;
      }
      // Count each corrupt stretch once, then look for the next plausible header.
      if (!in_corruption) ++corrupt_records_;
      in_corruption = true;
      const size_t next = data.find(std::string_view("MCP1", 4), pos + 1);
      if (next == std::string::npos) break;
      pos = next;
    }
    if (pos < data.size() && !in_corruption && pos + kHeaderBytes > data.size()) ++corrupt_records_;

    ::fchmod(seg->fd, 0600);  // segments written by an older version were 0644
    bytes_ += seg->bytes;
    segments_.push_back(std::move(seg));
  }
}

void SegmentLog::start_segment(uint64_t first_offset) {
  // A sealed segment that took no record would share the new one's name.
  if (!segments_.empty() && segments_.back()->entries.empty()) {
    bytes_ -= segments_.back()->bytes;
    if (!segments_.back()->path.empty()) dir_.remove(segments_.back()->path.filename());
    segments_.pop_back();
  }
  auto seg = std::make_unique<Segment>();
  seg->first_offset = first_offset;
  if (options_.dir.empty()) {
    // Memory mode: the last released segment's buffer, already paged in (a fresh one costs a
    // page fault per 4 KiB and a copy per doubling).
    seg->mem.swap(spare_mem_);
    seg->mem.clear();
    seg->mem.reserve(options_.segment_bytes + (256u << 10));  // the record that crosses the mark
  } else {
    seg->path = options_.dir / segment_name(first_offset);
    seg->fd = dir_.open(seg->path.filename(), O_RDWR | O_APPEND | O_CREAT | O_TRUNC, 0600);
    if (seg->fd < 0) fail("cannot create", seg->path);
  }
  segments_.push_back(std::move(seg));
  persist_meta();
}

void SegmentLog::drop_segment_front(bool count_as_dropped) {
  Segment& seg = *segments_.front();
  if (count_as_dropped) {
    for (const auto& e : seg.entries)
      if (e.offset > released_through_) {
        ++dropped_records_;
        dropped_items_ += e.items;
      }
  }
  bytes_ -= seg.bytes;
  if (!seg.path.empty()) {
    // The last segment on disk is the floor of the next offset: it goes only once log.meta
    // holds that floor.
    if (segments_.size() > 1 || persist_meta()) dir_.remove(seg.path.filename());
  } else if (seg.mem.capacity() > spare_mem_.capacity()) {
    spare_mem_.swap(seg.mem);
  }
  segments_.erase(segments_.begin());
}

uint64_t SegmentLog::append(std::string_view payload, uint32_t items) {
  if (payload.size() > kMaxRecordBytes) throw runtime_error("spool: record too large");
  std::lock_guard lock(mu_);
  const uint64_t offset = next_offset_;
  if (segments_.empty() || segments_.back()->sealed || segments_.back()->bytes >= options_.segment_bytes)
    start_segment(offset);
  Segment& seg = *segments_.back();

  char header[kHeaderBytes];
  const uint32_t len = static_cast<uint32_t>(payload.size());
  std::memcpy(header, &kMagic, 4);
  std::memcpy(header + 4, &len, 4);
  std::memcpy(header + 8, &offset, 8);
  std::memcpy(header + 16, &items, 4);
  // Only files are read back and checked; in memory the checksum would guard nothing.
  const uint32_t crc = seg.fd >= 0 ? crc32_of(std::string_view(header + 8, 12), payload) : 0;
  std::memcpy(header + 20, &crc, 4);
  const size_t size = kHeaderBytes + payload.size();

  uint64_t at = seg.bytes;  // where the record starts
  if (seg.fd >= 0) {
    // The file's real size, not our count: a file cut under us must not shift positions.
    struct stat st {};
    if (::fstat(seg.fd, &st) != 0) fail("cannot stat", seg.path);
    at = static_cast<uint64_t>(st.st_size);
    std::string record(header, kHeaderBytes);  // one write(2): a crash leaves no header alone
    record.append(payload);
    size_t done = 0;
    while (done < record.size()) {
      const ssize_t n = ::write(seg.fd, record.data() + done, record.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        // ENOSPC or EIO: cut back what part of the record went out; appends move on to a new
        // segment, so nothing after this depends on the cut succeeding.
        const int err = n == 0 ? ENOSPC : errno;
        (void)!::ftruncate(seg.fd, static_cast<off_t>(at));
        seg.sealed = true;
        errno = err;
        fail("cannot write", seg.path);
      }
      done += static_cast<size_t>(n);
    }
  } else {
    seg.mem.append(header, kHeaderBytes).append(payload);
  }
  seg.entries.push_back({offset, at + kHeaderBytes, len, items});
  bytes_ = bytes_ - seg.bytes + at + size;
  seg.bytes = at + size;
  next_offset_ = offset + 1;
  last_offset_ = offset;

  while (bytes_ > options_.max_bytes && segments_.size() > 1) drop_segment_front(true);
  return offset;
}

bool SegmentLog::read_payload(const Segment& seg, size_t index, std::string* out) const {
  const auto& e = seg.entries[index];
  if (seg.fd < 0) {
    out->assign(seg.mem, e.pos, e.len);
    return true;
  }
  out->assign(e.len, '\0');
  size_t done = 0;
  while (done < e.len) {
    const ssize_t n = ::pread(seg.fd, out->data() + done, e.len - done,
                              static_cast<off_t>(e.pos + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // Cut or removed under the log: this record is gone, the rest of the log is not.
      out->clear();
      if (e.offset > damaged_through_) {
        damaged_through_ = e.offset;
        ++corrupt_records_;
      }
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

std::vector<SegmentLog::Record> SegmentLog::read_from(uint64_t from, size_t max_records) const {
  std::lock_guard lock(mu_);
  std::vector<Record> out;
  from = std::max(from, released_through_ + 1);
  for (const auto& seg : segments_) {
    if (out.size() >= max_records) break;
    if (seg->entries.empty() || seg->last_offset() < from) continue;
    auto it = std::lower_bound(seg->entries.begin(), seg->entries.end(), from,
                               [](const Segment::Entry& e, uint64_t o) { return e.offset < o; });
    for (; it != seg->entries.end() && out.size() < max_records; ++it) {
      Record& r = out.emplace_back(Record{it->offset, it->items, {}});
      r.damaged = !read_payload(*seg, static_cast<size_t>(it - seg->entries.begin()), &r.payload);
    }
  }
  return out;
}

void SegmentLog::release_through(uint64_t offset) {
  std::lock_guard lock(mu_);
  released_through_ = std::max(released_through_, offset);
  while (!segments_.empty() && segments_.front()->last_offset() <= released_through_) {
    drop_segment_front(false);
  }
}

std::vector<SegmentLog::Record> SegmentLog::newest_segments(size_t count) const {
  std::lock_guard lock(mu_);
  std::vector<Record> out;
  for (size_t s = segments_.size() - std::min(count, segments_.size()); s < segments_.size(); ++s) {
    const Segment& seg = *segments_[s];
    for (size_t i = 0; i < seg.entries.size(); ++i) {
      Record r{seg.entries[i].offset, seg.entries[i].items, {}};
      if (read_payload(seg, i, &r.payload)) out.push_back(std::move(r));
    }
  }
  return out;
}

uint64_t SegmentLog::newest_segment_start() const {
  std::lock_guard lock(mu_);
  return segments_.empty() ? 0 : segments_.back()->first_offset;
}

uint64_t SegmentLog::last_offset() const {
  std::lock_guard lock(mu_);
  return last_offset_ > released_through_ ? last_offset_ : 0;
}

SegmentLogStats SegmentLog::stats() const {
  std::lock_guard lock(mu_);
  SegmentLogStats s;
  s.bytes = bytes_;
  s.segments = segments_.size();
  s.dropped_records = dropped_records_;
  s.dropped_items = dropped_items_;
  s.corrupt_records = corrupt_records_;
  s.next_offset = next_offset_;
  for (const auto& seg : segments_) {
    for (const auto& e : seg->entries) {
      if (e.offset <= released_through_) continue;
      if (s.first_offset == 0) s.first_offset = e.offset;
      ++s.records;
      s.items += e.items;
    }
  }
  return s;
}

}  // namespace mcp
