// SegmentLog: a bounded, append-only log of opaque records, addressed by increasing 64-bit
// offsets, stored in segment files (or in memory when no directory is given).
//
// Contract:
// - append() assigns the record an offset greater than every offset ever handed out in this
//   directory, counting from 1 and never from a clock (a clock stepped back cannot reuse one):
//   the directory's log.meta keeps the next offset (rewritten when a segment starts or is
//   deleted) beside the last record on disk. A directory is one log: id() is random, made with
//   log.meta and kept with it (0 for a directory an older version wrote, whose offsets were
//   clock based), so a reader can tell a new log from an old one that went backwards. In memory
//   each SegmentLog is a new log.
// - A directory has one writer: a second SegmentLog on it (another process) throws, naming the
//   holder's pid (flock on .lock, released when the process dies).
// - The directory is one only we can write in, and a link in it is never followed
//   (common/safe_file.h): a directory another user could plant links in is refused on open.
// - A write that fails (ENOSPC, EIO) leaves no record: the segment is cut back and sealed, the
//   next append starts a new one, and positions always come from the file's real size.
// - Each record in a file carries a CRC32 over its offset, item count and payload; a corrupt record found on
//   open is skipped (the scan resynchronises on the next valid header) and counted, never returned. (In
//   memory the field is 0: nothing reads it back.) A record that cannot be read back later (its file
//   truncated or removed under the log) comes back with `damaged` set and no payload, counted once.
// - When the total size exceeds max_bytes, whole segments are dropped oldest first and their
//   records counted in dropped_records; the newest segment is never dropped.
// - release_through(o) marks every record with offset <= o as no longer needed; segments whose
//   records are all released are deleted.
// Thread-safe: every method takes the log's mutex.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/safe_file.h"

namespace mcp {

struct SegmentLogOptions {
  std::filesystem::path dir;            // empty: keep segments in memory; created 0700, files 0600
  uint64_t segment_bytes = 4 << 20;     // start a new segment past this size
  uint64_t max_bytes = 256ull << 20;    // drop oldest segments past this total
};

struct SegmentLogStats {
  uint64_t bytes = 0;            // on disk (or in memory), released segments excluded
  uint64_t records = 0;          // stored and not yet released
  uint64_t items = 0;            // the items in those records
  uint64_t segments = 0;
  uint64_t dropped_records = 0;  // lost to max_bytes
  uint64_t dropped_items = 0;    // the items in those records
  uint64_t corrupt_records = 0;  // failed their checksum on open, or unreadable later
  uint64_t first_offset = 0;     // first unreleased offset, 0 when empty
  uint64_t next_offset = 0;      // lower bound of the next append's offset
};

class SegmentLog {
 public:
  // Opens (creating the directory) and indexes existing segments. Throws mcp::Error on I/O failure.
  explicit SegmentLog(SegmentLogOptions options);
  ~SegmentLog();
  SegmentLog(const SegmentLog&) = delete;
  SegmentLog& operator=(const SegmentLog&) = delete;

  // `items` (e.g. events in a batch) is stored with the record so drops can be counted in items.
  uint64_t append(std::string_view payload, uint32_t items = 1);

  struct Record {
    uint64_t offset;
    uint32_t items;
    std::string payload;
    bool damaged = false;  // could not be read back: payload empty, counted in corrupt_records
  };
  // Up to max_records stored, unreleased records with offset >= from, in offset order.
  std::vector<Record> read_from(uint64_t from, size_t max_records) const;

  void release_through(uint64_t offset);

  // Every record (released or not) still present in the `count` newest segments, in offset
  // order; used at start-up to recover state written after the last snapshot.
  std::vector<Record> newest_segments(size_t count) const;
  // The offset the newest segment starts at (0: none). Changes exactly when a segment starts,
  // so a caller can snapshot its own state once per segment. Cheap.
  uint64_t newest_segment_start() const;

  // Highest stored, unreleased offset; 0 when nothing is waiting. Cheap.
  uint64_t last_offset() const;

  SegmentLogStats stats() const;

  // This log's identity (see the contract); never changes while it is open.
  uint64_t id() const { return id_; }

 private:
  struct Segment;
  void lock_directory();
  void open_existing();
  void load_meta(bool had_segments);
  bool persist_meta() noexcept;  // false when log.meta could not be written
  void start_segment(uint64_t first_offset);
  void drop_segment_front(bool count_as_dropped);
  bool read_payload(const Segment& seg, size_t index, std::string* out) const;

  SegmentLogOptions options_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Segment>> segments_;
  uint64_t next_offset_ = 0;
  uint64_t last_offset_ = 0;
  uint64_t released_through_ = 0;
  uint64_t bytes_ = 0;
  uint64_t dropped_records_ = 0;
  uint64_t dropped_items_ = 0;
  mutable uint64_t corrupt_records_ = 0;
  mutable uint64_t damaged_through_ = 0;  // the highest offset already counted as unreadable
  uint64_t id_ = 0;
  SafeDir dir_;  // every file is opened through it (none in memory mode)
  int lock_fd_ = -1;
  std::string spare_mem_;  // memory mode: a released segment's buffer, reused by the next
};

uint32_t crc32_of(std::string_view a, std::string_view b);

}  // namespace mcp
