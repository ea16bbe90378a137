// PolicyStore: sampling policies keyed by (service, probe, trace_id_prefix), the latest write wins. Persisted as
// a JSON array in the state dir (write-to-temp + rename) and reloaded on start; an empty path
// keeps them in memory. Not thread-safe: the broker serialises access.
// A stored record that fails validate_policy() (or a file that is not JSON at all) never stops
// the broker: on load the record is skipped, copied to FILE.quarantine (the whole file is
// renamed there when unreadable) and named in one warning.
#pragma once
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mcp/v1/sampling.pb.h"

#include "broker/policy/policy_key.h"
#include "clock/clock_source.h"
#include "common/sampling_bounds.h"

namespace mcp::broker {

// Policy bounds (README "Broker limits", common/sampling_bounds.h): sampling_rate 0 (unset) or
// in [1e-6, 1]; target_qps 0 (unset) or in [0.01, 1e7] events/s; exactly one set; service and probe at most
// 1024 bytes; trace_id_prefix empty or lowercase hex of 1 to 32 digits (common/trace_id_prefix.h); at most 32 service_labels,
// keys and values at most 256 bytes. Throws mcp::Error (usage) naming the field.
void validate_policy(const mcp::v1::Policy& policy);
// What the broker pushes to agents when the policy of `key` is removed: the key with
// neither sampling_rate nor target_qps, which no stored policy has (validate_policy), so an
// agent tells it from a policy; an agent from before removals changes nothing on it.
mcp::v1::Policy removal_of(const PolicyKey& key);
PolicyKey key_of(const mcp::v1::Policy& policy);
// Throws mcp::Error (usage) when `policy` would be a prefix rule past kMaxTraceIdPrefixRules
// for its (service, probe) in `stored` (common/trace_id_prefix.h): an agent drops what does
// not fit with a log line, so the store would list rules no agent applies. Both backends
// call it on their stored policies.
void check_prefix_room(const std::map<PolicyKey, mcp::v1::Policy>& stored, const mcp::v1::Policy& policy);

class PolicyStore {
 public:
  // Loads the file when it exists, quarantining what does not validate (see above). `clock`
  // stamps updated_unix_ns (its realtime); null: the system's.
  explicit PolicyStore(std::filesystem::path file = {}, std::shared_ptr<clock::ClockSource> clock = nullptr);

  // validate_policy() and check_prefix_room(), then stamps (updated_unix_ns) and stores.
  mcp::v1::Policy apply(const mcp::v1::Policy& policy);
  std::vector<mcp::v1::Policy> list() const;
  // Removes the policy of `key`; false when there was none.
  bool remove(const PolicyKey& key);

 private:
  void persist() const;
  std::filesystem::path file_;
  std::shared_ptr<clock::ClockSource> clock_;
  std::map<PolicyKey, mcp::v1::Policy> policies_;
};

}  // namespace mcp::broker
