// Detaching probes: one at a time, in a batch that closes every link of a reload's commit
// together, every probe before the final drain, or one file of a probe.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <iterator>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "loader/bpf_session.h"
#include "mcp_abi.h"
#include "mcp_bpf.skel.h"

namespace mcp::loader {

void BpfSession::remove_probe(uint32_t id) {
  std::lock_guard toggle(toggle_mu_);
  window_fraction_[id % MCP_MAX_PROBES].store(1, std::memory_order_relaxed);
  std::unique_ptr<Probe> p;
  {
    std::unique_lock lock(mu_);
    auto it = probes_.find(id);
    if (it == probes_.end()) return;
    p = std::move(it->second);
    probes_.erase(it);
  }
  // A group member: the link fires for its id until the last member goes, so keep nothing.
  bool grouped;
  {
    std::shared_lock lock(mu_);
    grouped = grouped_.count(id) > 0;
  }
  if (grouped) {
    // A removal cannot fail (Attachment's destructor calls it): a failed write is counted, and
    // the member goes on being sampled by its old configuration until the link closes.
    const mcp_probe_config none{};  // threshold 0, no trace-id argument: nothing kept
    if (map_io_->update(bpf_map__fd(skel()->maps.probe_configs), &id, &none, BPF_ANY)) {
      const int err = errno;
      map_failures_.report("probe_configs",
                           "cannot stop removed group member " + p->info.name + " (probe " + std::to_string(id) +
                               ") from sampling",
                           err);
    }
  }
  {
    std::unique_lock lock(mu_);
    retired_names_[id] = p->info.name;
    if (batching_) {
      // Not reusable before the batch has closed its links and set the real position.
      quarantine_[id] = UINT64_MAX;
      batch_ids_.push_back(id);
      for (auto& target : p->targets)
        batch_links_.insert(batch_links_.end(), std::make_move_iterator(target.links.begin()),
                            std::make_move_iterator(target.links.end()));
      return;
    }
  }
  p.reset();  // detaches
  retire({id});
}

BpfSession::DetachBatch::DetachBatch(BpfSession& session) : session_(session) {
  std::unique_lock lock(session_.mu_);
  session_.batching_ = true;
}

BpfSession::DetachBatch::~DetachBatch() {
  std::lock_guard toggle(session_.toggle_mu_);
  std::vector<uint32_t> ids;
  std::vector<Link> links;
  {
    std::unique_lock lock(session_.mu_);
    session_.batching_ = false;
    ids.swap(session_.batch_ids_);
    links.swap(session_.batch_links_);
  }
  close_together(links);
  session_.retire(ids);
}

void BpfSession::close_together(std::vector<Link>& links) {
  std::atomic<size_t> next{0};
  auto close_some = [&] {
    for (size_t i; (i = next.fetch_add(1)) < links.size();) links[i].reset();
  };
  {
    std::vector<std::jthread> closers;
    try {
      for (size_t n = 1; n < std::min(links.size(), kClosers); n++) closers.emplace_back(close_some);
    } catch (const std::system_error&) {
      // No more threads: the ones started and this one close the rest.
    }
    close_some();
  }
  links.clear();
}

void BpfSession::detach_all() {
  stop_windows();
  std::lock_guard toggle(toggle_mu_);
  std::vector<Link> links;
  {
    std::unique_lock lock(mu_);
    for (auto& [id, p] : probes_) {
      for (auto& target : p->targets)
        links.insert(links.end(), std::make_move_iterator(target.links.begin()),
                     std::make_move_iterator(target.links.end()));
      p->targets.clear();
    }
  }
  close_together(links);
  sweep_pending(0);
  finish_estimates();
}

void BpfSession::detach_file(uint32_t id, uint64_t key) {
  std::lock_guard toggle(toggle_mu_);
  std::vector<Link> links;
  {
    std::unique_lock lock(mu_);
    auto it = probes_.find(id);
    if (it == probes_.end()) return;
    auto& targets = it->second->targets;
    auto t = std::find_if(targets.begin(), targets.end(), [&](const Target& x) { return x.key == key; });
    if (t == targets.end()) return;
    links = std::move(t->links);
    targets.erase(t);
  }
  links.clear();  // detaches, outside mu_
}

void BpfSession::drop_earlier_targets(uint32_t id) {
  std::lock_guard toggle(toggle_mu_);
  std::vector<Target> old;
  {
    std::unique_lock lock(mu_);
    auto it = probes_.find(id);
    if (it == probes_.end() || it->second->targets.size() < 2) return;
    auto& targets = it->second->targets;
    old.assign(std::make_move_iterator(targets.begin()), std::make_move_iterator(targets.end() - 1));
    targets.erase(targets.begin(), targets.end() - 1);
  }
  old.clear();  // detaches, outside mu_
}

}  // namespace mcp::loader
