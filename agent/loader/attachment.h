// Attachment: owns one probe of a BpfSession. The probe (every link of it) is detached
// exactly when its Attachment is destroyed or reset, so a staged reload that throws
// half-way detaches what it attached and nothing else. FileAttachment: owns one file of
// a probe (BpfSession::attach_file), detached when it goes; the probe stays. Move-only;
// the session must outlive them.
#pragma once
#include <cstdint>
#include <utility>

#include "loader/bpf_session.h"

namespace mcp::loader {

class Attachment {
 public:
  Attachment() = default;
  Attachment(BpfSession& session, uint32_t id) : session_(&session), id_(id) {}
  Attachment(Attachment&& o) noexcept : session_(std::exchange(o.session_, nullptr)), id_(o.id_) {}
  Attachment& operator=(Attachment&& o) noexcept {
    if (this != &o) {
      reset();
      session_ = std::exchange(o.session_, nullptr);
      id_ = o.id_;
    }
    return *this;
  }
  Attachment(const Attachment&) = delete;
  Attachment& operator=(const Attachment&) = delete;
  ~Attachment() { reset(); }

  void reset() {
    if (session_) std::exchange(session_, nullptr)->remove_probe(id_);
  }
  uint32_t id() const { return id_; }
  explicit operator bool() const { return session_ != nullptr; }

 private:
  BpfSession* session_ = nullptr;
  uint32_t id_ = 0;
};

class FileAttachment {
 public:
  FileAttachment() = default;
  // Attaches probe `id`'s programs to `target`; throws as BpfSession::attach_file does.
  FileAttachment(BpfSession& session, uint32_t id, const UprobeTarget& target)
      : session_(&session), id_(id), key_(session.attach_file(id, target)) {}
  FileAttachment(FileAttachment&& o) noexcept
      : session_(std::exchange(o.session_, nullptr)), id_(o.id_), key_(o.key_) {}
  FileAttachment& operator=(FileAttachment&& o) noexcept {
    if (this != &o) {
      reset();
      session_ = std::exchange(o.session_, nullptr);
      id_ = o.id_;
      key_ = o.key_;
    }
    return *this;
  }
  FileAttachment(const FileAttachment&) = delete;
  FileAttachment& operator=(const FileAttachment&) = delete;
  ~FileAttachment() { reset(); }

  void reset() {
    if (session_) std::exchange(session_, nullptr)->detach_file(id_, key_);
  }

 private:
  BpfSession* session_ = nullptr;
  uint32_t id_ = 0;
  uint64_t key_ = 0;
};

}  // namespace mcp::loader
