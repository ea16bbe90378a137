// Test support: the real Prometheus tools (Debian package `prometheus`, in scripts/setup).
// - promtool_check_metrics(page): `promtool check metrics` on a /metrics page (format and
//   lint: names, suffixes, help); exit 0 and no output when it has nothing to say.
// - PrometheusServer: a real `prometheus` scraping the given targets every second, on a
//   port it picks (127.0.0.1:0, read back from /proc), queried through its HTTP API.
// Header-only; callers skip visibly (GTEST_SKIP) when has_prometheus() is false.
#pragma once
#include <httplib.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "process.h"
#include "run_command.h"

namespace mcp::test {

inline bool has_prometheus() {
  return access("/usr/bin/promtool", X_OK) == 0 && access("/usr/bin/prometheus", X_OK) == 0;
}

// exit_code 0: accepted; otherwise `out`/`err` name every problem.
inline CommandResult promtool_check_metrics(const std::string& page) {
  char path[] = "/tmp/mcp-metrics-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return {};
  close(fd);
  std::ofstream(path) << page;
  auto r = run_command({"sh", "-c", "promtool check metrics < " + shell_quote(path)});
  unlink(path);
  return r;
}

// The value of one series in a /metrics page ("name" or "name{a=\"x\",b=\"y\"}", labels in
// the page's order: alphabetical for prometheus-cpp), or nullopt when the page has no such line.
inline std::optional<double> sample_value(const std::string& page, const std::string& series) {
  std::istringstream in(page);
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() > series.size() && line.compare(0, series.size(), series) == 0 && line[series.size()] == ' ')
      return std::stod(line.substr(series.size() + 1));
  }
  return std::nullopt;
}

// The port in a "metrics on 127.0.0.1:PORT" line of a process's log (mcp-broker
// --metrics-listen prints one), 0 when none yet.
inline int metrics_port_in_log(const std::string& log) {
  std::smatch m;
  return std::regex_search(log, m, std::regex("metrics on 127\\.0\\.0\\.1:([0-9]+)")) ? std::stoi(m[1]) : 0;
}

// GET /metrics on 127.0.0.1:port; empty when it does not answer 200.
inline std::string scrape_metrics(int port) {
  auto res = httplib::Client("127.0.0.1", port).Get("/metrics");
  return res && res->status == 200 ? res->body : std::string();
}

// The TCP port `pid` listens on (from /proc/PID/fd and /proc/net/tcp{,6}), 0 when none yet.
inline int listening_port(pid_t pid) {
  std::set<std::string> inodes;
  std::error_code ec;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    const auto target = std::filesystem::read_symlink(fd.path(), ec).string();
    if (target.starts_with("socket:[")) inodes.insert(target.substr(8, target.size() - 9));
  }
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string sl, local, remote, state, queues, timer, retr, uid, timeout, inode;
      f >> sl >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
      if (state == "0A" && inodes.count(inode))  // 0A: LISTEN
        return std::stoi(local.substr(local.rfind(':') + 1), nullptr, 16);
    }
  }
  return 0;
}

class PrometheusServer {
 public:
  // `targets`: HOST:PORT of /metrics endpoints, one job `name` each (job label = name).
  PrometheusServer(const std::vector<std::pair<std::string, std::string>>& targets,
                   const std::filesystem::path& dir)
      : dir_(dir) {
    std::filesystem::create_directories(dir_ / "tsdb");
    std::ofstream cfg(dir_ / "prometheus.yml");
    cfg << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n";
    for (const auto& [job, target] : targets)
      cfg << "  - job_name: " << job << "\n    static_configs:\n      - targets: ['" << target << "']\n";
    cfg.close();
    process_.emplace(std::vector<std::string>{"/usr/bin/prometheus",
                                              "--config.file=" + (dir_ / "prometheus.yml").string(),
                                              "--storage.tsdb.path=" + (dir_ / "tsdb").string(),
                                              "--web.listen-address=127.0.0.1:0"},
                     dir_, "prometheus");
    // Ready once it listens and says so (the TSDB is open, the scrape manager started).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      if (port_ == 0) port_ = listening_port(process_->pid());
      if (port_ != 0 && process_->err().find("Server is ready to receive web requests") != std::string::npos) return;
      if (process_->wait(std::chrono::milliseconds(50))) break;  // exited
    }
    throw std::runtime_error("prometheus did not start: " + process_->err());
  }

  int port() const { return port_; }
  std::string log() const { return process_->err(); }

  // GET /api/v1/query?query=... : the whole answer ({"status": "success"|"error", ...}).
  nlohmann::json query_answer(const std::string& promql) const {
    httplib::Client c("127.0.0.1", port_);
    auto res = c.Get("/api/v1/query", httplib::Params{{"query", promql}}, httplib::Headers{});
    if (!res) return {{"status", "error"}, {"error", "no response"}};
    auto body = nlohmann::json::parse(res->body, nullptr, false);
    if (body.is_discarded()) return {{"status", "error"}, {"error", res->body}};
    return body;
  }
  // The result vector (empty when nothing matches yet or the query failed).
  nlohmann::json query(const std::string& promql) const {
    auto body = query_answer(promql);
    if (body["status"] != "success") return nlohmann::json::array();
    return body["data"]["result"];
  }
  // The value of a query that returns one series, or nullopt while it returns none or several.
  std::optional<double> value(const std::string& promql) const {
    const auto r = query(promql);
    if (!r.is_array() || r.size() != 1) return std::nullopt;
    return std::stod(r[0]["value"][1].get<std::string>());
  }
  // Polls value(promql) until `ok` holds or `limit` passes; returns the last value seen.
  template <typename Ok>
  std::optional<double> wait_value(const std::string& promql, Ok ok,
                                   std::chrono::milliseconds limit = std::chrono::seconds(30)) const {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    std::optional<double> v;
    while (std::chrono::steady_clock::now() < deadline) {
      v = value(promql);
      if (v && ok(*v)) return v;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return v;
  }

 private:
  std::filesystem::path dir_;
  std::optional<Process> process_;
  int port_ = 0;
};

}  // namespace mcp::test
