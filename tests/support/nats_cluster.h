// Test helpers for a JetStream cluster of real nats-server processes on 127.0.0.1.
//
// NatsCluster(n, dir) writes one config per node (server_name n1..nN, client and route ports
// chosen free at runtime, store dirs under dir), starts them as children with stderr in
// dir/nN.log, and waits until every node accepts clients and one has become the JetStream
// metadata leader. kill(i) / restart(i) stop and start a node (same ports and store), and
// servers() is the --backend value "nats://127.0.0.1:P1,...". NatsClusterOptions names the nodes,
// sets a JetStream domain and adds configuration (leaf nodes). nats_server_binary() is empty when
// nats-server is not installed; tests skip visibly then. Header-only: used by tests and benches.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace mcp::test {

// The nats-server on PATH (or in /usr/sbin, /usr/bin), or "" when there is none.
inline std::string nats_server_binary() {
  std::vector<std::string> dirs;
  if (const char* path = std::getenv("PATH")) {
    std::stringstream in(path);
    std::string d;
    while (std::getline(in, d, ':')) dirs.push_back(d);
  }
  dirs.insert(dirs.end(), {"/usr/sbin", "/usr/bin", "/usr/local/bin"});
  for (const auto& d : dirs) {
    const auto candidate = std::filesystem::path(d) / "nats-server";
    if (!d.empty() && access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return "";
}

// `count` distinct free TCP ports on 127.0.0.1: every socket stays bound until all are picked.
inline std::vector<int> free_ports(size_t count) {
  std::vector<int> fds;
  std::vector<int> ports;
  for (size_t i = 0; i < count; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof addr;
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
      throw std::runtime_error("cannot pick a free port");
    fds.push_back(fd);
    ports.push_back(ntohs(addr.sin_port));
  }
  for (int fd : fds) close(fd);
  return ports;
}

inline bool port_accepts(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return ok;
}

inline std::string read_text(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Per cluster: node names are prefix1..prefixN (unique across clusters joined by leaf nodes),
// `domain` its JetStream domain (empty: none), `extra` configuration appended to every node's
// file (a leafnodes block).
struct NatsClusterOptions {
  std::string prefix = "n";
  std::string domain;
  std::string extra;
};

class NatsCluster {
 public:
  NatsCluster(size_t nodes, std::filesystem::path dir, NatsClusterOptions options = {})
      : dir_(std::move(dir)), options_(std::move(options)) {
    binary_ = nats_server_binary();
    if (binary_.empty()) throw std::runtime_error("nats-server is not installed");
    std::filesystem::create_directories(dir_);
    const std::vector<int> ports = free_ports(nodes * 2);
    for (size_t i = 0; i < nodes; ++i) {
      Node n;
      n.name = options_.prefix + std::to_string(i + 1);
      n.client_port = ports[2 * i];
      n.route_port = ports[2 * i + 1];
      nodes_.push_back(n);
    }
    for (size_t i = 0; i < nodes; ++i) write_config(i);
    for (size_t i = 0; i < nodes; ++i) start(i);
    wait_ready(std::chrono::seconds(20));
  }
  ~NatsCluster() {
    for (size_t i = 0; i < nodes_.size(); ++i) kill(i, SIGKILL);
  }
  NatsCluster(const NatsCluster&) = delete;
  NatsCluster& operator=(const NatsCluster&) = delete;

  size_t size() const { return nodes_.size(); }
  std::string name(size_t i) const { return nodes_[i].name; }
  std::string url(size_t i) const {
    return "nats://127.0.0.1:" + std::to_string(nodes_[i].client_port);
  }
  // The --backend value: every node, node 0 first.
  std::string servers() const {
    std::string out;
    for (size_t i = 0; i < nodes_.size(); ++i) out += (i ? "," : "") + url(i);
    return out;
  }
  std::string log(size_t i) const { return read_text(log_path(i)); }
  bool running(size_t i) const { return nodes_[i].pid > 0; }

  void kill(size_t i, int sig = SIGKILL) {
    Node& n = nodes_[i];
    if (n.pid <= 0) return;
    ::kill(n.pid, sig);
    int status = 0;
    waitpid(n.pid, &status, 0);
    n.pid = -1;
  }
  void restart(size_t i) {
    start(i);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!port_accepts(nodes_[i].client_port) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Index of the node named `name` (as JetStream reports leaders), or size() when unknown.
  size_t index_of(const std::string& name) const {
    for (size_t i = 0; i < nodes_.size(); ++i)
      if (nodes_[i].name == name) return i;
    return nodes_.size();
  }

 private:
  struct Node {
    std::string name;
    int client_port = 0;
    int route_port = 0;
    pid_t pid = -1;
  };

  std::filesystem::path config_path(size_t i) const { return dir_ / (nodes_[i].name + ".conf"); }
  std::filesystem::path log_path(size_t i) const { return dir_ / (nodes_[i].name + ".log"); }

  void write_config(size_t i) {
    const Node& n = nodes_[i];
    std::ofstream out(config_path(i));
    out << "server_name: " << n.name << "\n"
        << "listen: 127.0.0.1:" << n.client_port << "\n"
        << "jetstream {\n  store_dir: \"" << (dir_ / n.name).string() << "\"\n"
        << (options_.domain.empty() ? "" : "  domain: " + options_.domain + "\n")
        << "  max_memory_store: 256MB\n  max_file_store: 2GB\n}\n"
        << options_.extra << "\n";
    if (nodes_.size() > 1) {
      out << "cluster {\n  name: mcp-test-" << options_.prefix << "\n  listen: 127.0.0.1:" << n.route_port << "\n  routes: [\n";
      for (size_t j = 0; j < nodes_.size(); ++j)
        if (j != i) out << "    nats-route://127.0.0.1:" << nodes_[j].route_port << "\n";
      out << "  ]\n}\n";
    }
  }

  void start(size_t i) {
    Node& n = nodes_[i];
    const std::string config = config_path(i).string();
    const std::string log = log_path(i).string();
    n.pid = fork();
    if (n.pid == 0) {
      FILE* f = std::fopen(log.c_str(), "a");
      if (f) {
        dup2(fileno(f), 1);
        dup2(fileno(f), 2);
      }
      execl(binary_.c_str(), binary_.c_str(), "-c", config.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    if (n.pid < 0) throw std::runtime_error("fork failed");
  }

  void wait_ready(std::chrono::seconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      bool ready = true;
      bool leader = nodes_.size() == 1;
      for (size_t i = 0; i < nodes_.size(); ++i) {
        int status = 0;
        if (waitpid(nodes_[i].pid, &status, WNOHANG) == nodes_[i].pid) {
          nodes_[i].pid = -1;
          throw std::runtime_error(nodes_[i].name + " exited: " + log(i));
        }
        ready = ready && port_accepts(nodes_[i].client_port);
        const std::string text = log(i);
        leader = leader || text.find("new metadata leader") != std::string::npos ||
                 text.find("JetStream cluster new metadata leader") != std::string::npos;
      }
      if (ready && leader) return;
      if (std::chrono::steady_clock::now() >= deadline)
        throw std::runtime_error("nats cluster not ready: " + log(0));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  std::filesystem::path dir_;
  NatsClusterOptions options_;
  std::string binary_;
  std::vector<Node> nodes_;
};

}  // namespace mcp::test
