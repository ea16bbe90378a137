// Agent ids: the broker deduplicates batches by (agent id, sequence), so two agents that share
// an id lose each other's batches as "duplicates". Ids therefore never default to the host name.
// - unique_agent_id(): "HOST-PID-RANDOM" (64 random bits), a fresh id for one run (`trace`).
// - stable_agent_id(dir): the id stored in DIR/agent-id, created (0600, "HOST-RANDOM") on first
//   use, so a daemon keeps its id across restarts and the broker dedups its spool replays.
#pragma once
#include <filesystem>
#include <string>

namespace mcp {

// gethostname(), or "agent" when it has none: what the agent calls its host (the broker's
// Hello.hostname, OTLP's host.name).
std::string host_name();

std::string unique_agent_id();

// Throws mcp::Error (runtime) when the file can neither be read nor created, when a link is
// where it goes, or when DIR is one another user could plant links in (common/safe_file.h).
std::string stable_agent_id(const std::filesystem::path& dir);

}  // namespace mcp
