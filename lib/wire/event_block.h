// Compact wire events (capability "events-v2", proto/mcp/v1/sampling.proto EventBlock):
// EventBlockEncoder turns mcp::Event into one batch's EventBlock through the block's Dictionary
// (wire/dictionary.h: each string once, repaired to valid UTF-8; pair sets sorted by key).
// EventBlockDecoder reads a block back into mcp::Event. Its input is untrusted (a broker, a
// journal file): parse() runs check_block (wire/block_check.h) before any event is read and
// rejects the block with its one reason. Decoded events view strings owned by the decoder,
// valid until the next parse().
// Only gRPC-facing libraries include this; it pulls in the generated protobuf header.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/event.h"
#include "mcp/v1/sampling.pb.h"
#include "wire/dictionary.h"
#include "wire/event_fields.h"

namespace mcp {

class EventBlockEncoder {
 public:
  EventBlockEncoder() = default;
  void add(const Event& event);
  size_t size() const { return static_cast<size_t>(block_.events_size()); }
  // Appends the serialized block to `out` and starts an empty one (dictionaries reset: every
  // block decodes on its own).
  void finish(std::string& out);
  // The same, handing over the block itself (for in-process consumers such as the OTLP sink).
  void finish(mcp::v1::EventBlock* out);

 private:
  template <class Msg, class Codec>
  friend void wire::event_to_proto(const Event&, Msg&, Codec&);
  // The codec wire::event_to_proto asks for a string's and a pair set's dictionary index.
  uint32_t text(std::string_view raw, wire::Hot hot);
  uint32_t pairs(const std::vector<std::pair<std::string, std::string>>& p) { return dict_.pairs(p); }

  // The last string a field interned, compared before the dictionary's hash map: runs of events
  // from one probe and process repeat them, and a short compare is cheaper than hash plus lookup.
  struct Memo {
    std::string raw;
    uint32_t index = 0;  // 0: nothing remembered (or the empty string)
  };
  uint32_t intern(Memo& memo, std::string_view raw);
  void reset();

  mcp::v1::EventBlock block_;
  wire::Dictionary dict_{&block_};
  Memo probe_, comm_, service_, container_id_, pod_uid_;
};

class EventBlockDecoder {
 public:
  // Parses and validates a serialized EventBlock; false with `error` set when it is malformed
  // (then size() is 0).
  bool parse(std::string_view bytes, std::string& error);
  size_t size() const { return static_cast<size_t>(block_.events_size()); }
  // Event i into `out`, which callers reuse: once warm this allocates nothing. event_id is the
  // broker's id (0 from an agent).
  void get(size_t i, Event& out, uint64_t& event_id) const;

 private:
  template <class Msg, class Codec>
  friend void wire::event_from_proto(const Msg&, Event&, const Codec&);
  // The codec wire::event_from_proto reads indices through (parse() checked them).
  const std::string& text(uint32_t index) const;
  const std::vector<std::pair<std::string, std::string>>& pairs(uint32_t index) const { return pair_sets_[index]; }

  mcp::v1::EventBlock block_;
  std::vector<std::vector<std::pair<std::string, std::string>>> pair_sets_;
};

}  // namespace mcp
