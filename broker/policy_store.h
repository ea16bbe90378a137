// PolicyStore: sampling policies keyed by (service, probe), the latest write wins. Persisted as
// a JSON array in the state dir (write-to-temp + rename) and reloaded on start; an empty path
// keeps them in memory. Not thread-safe: the broker serialises access.
#pragma once
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "mcp/v1/sampling.pb.h"

namespace mcp::broker {

class PolicyStore {
 public:
  // Throws mcp::Error (runtime) when the file exists but is not valid.
  explicit PolicyStore(std::filesystem::path file = {});

  // Validates (usage error: rate outside (0,1], negative qps, neither set), stamps and stores.
  mcp::v1::Policy apply(const mcp::v1::Policy& policy);
  std::vector<mcp::v1::Policy> list() const;

 private:
  void persist() const;
  std::filesystem::path file_;
  std::map<std::pair<std::string, std::string>, mcp::v1::Policy> policies_;
};

}  // namespace mcp::broker
