#include "broker/net/grpc_endpoint.h"

#include <grp.h>
#include <grpcpp/security/server_credentials.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "common/error.h"
#include "common/text_file.h"

namespace mcp::broker {
namespace {

std::shared_ptr<grpc::ServerCredentials> server_credentials(const BrokerOptions& o) {
  if (!o.tls_cert.empty() || !o.tls_key.empty()) {
    if (o.tls_cert.empty() || o.tls_key.empty()) throw usage_error("TLS needs both --tls-cert and --tls-key");
    grpc::SslServerCredentialsOptions ssl(o.tls_ca.empty()
                                              ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                              : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    if (!o.tls_ca.empty()) ssl.pem_root_certs = read_text_file(o.tls_ca, "TLS CA");
    ssl.pem_key_cert_pairs.push_back(
        {read_text_file(o.tls_key, "TLS key"), read_text_file(o.tls_cert, "TLS certificate")});
    return grpc::SslServerCredentials(ssl);
  }
  if (!o.tls_ca.empty()) throw usage_error("--tls-ca on the broker needs --tls-cert and --tls-key");
  return grpc::InsecureServerCredentials();
}

// Resolved before listening, so an unknown group fails with nothing started.
std::optional<gid_t> socket_group(const BrokerOptions& o) {
  if (o.socket_group.empty()) return std::nullopt;
  if (!o.listen.starts_with("unix:")) throw usage_error("--socket-group needs a unix:PATH --listen, not " + o.listen);
  const struct group* g = ::getgrnam(o.socket_group.c_str());
  if (g == nullptr) throw usage_error("--socket-group: no group named '" + o.socket_group + "'");
  return g->gr_gid;
}

void restrict_socket(const std::string& listen, std::optional<gid_t> group) {
  std::string path = listen.substr(std::string_view("unix:").size());
  if (path.starts_with("//")) path.erase(0, 2);  // unix:///abs/path
  if (group && ::chown(path.c_str(), static_cast<uid_t>(-1), *group) != 0)
    throw runtime_error("cannot give " + path + " to group " + std::to_string(*group) + ": " + std::strerror(errno));
  if (::chmod(path.c_str(), group ? 0660 : 0600) != 0)
    throw runtime_error("cannot restrict " + path + ": " + std::strerror(errno));
}

}  // namespace

GrpcEndpoint::GrpcEndpoint(const BrokerOptions& options, grpc::Service* service) {
  const auto creds = server_credentials(options);
  const std::optional<gid_t> group = socket_group(options);
  const bool unix_socket = options.listen.starts_with("unix:");
  grpc::ServerBuilder builder;
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, static_cast<int>(options.handshake_timeout.count()));
  if (options.connection_idle.count() > 0)
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, static_cast<int>(options.connection_idle.count()));
  if (unix_socket) {
    builder.AddListeningPort(options.listen, creds, &port_);
  } else {
    listener_ = std::make_unique<Listener>(options.listen);
    port_ = listener_->port();
    acceptor_ = builder.experimental().AddExternalConnectionAcceptor(
        grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD, creds);
  }
  builder.RegisterService(service);
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.limits.max_message_bytes));
  server_ = builder.BuildAndStart();
  if (!server_ || port_ == 0) throw runtime_error("cannot listen on " + options.listen);
  if (unix_socket) restrict_socket(options.listen, group);
  if (listener_)
    listener_->start([this](int listen_fd, int fd) {
      grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters p;
      p.listener_fd = listen_fd;
      p.fd = fd;
      acceptor_->HandleNewConnection(&p);
    });
}

GrpcEndpoint::~GrpcEndpoint() { stop(std::chrono::milliseconds(0)); }

ListenerHealth GrpcEndpoint::health() const { return listener_ ? listener_->health() : descriptor_health(); }

void GrpcEndpoint::stop(std::chrono::milliseconds grace) {
  if (!server_) return;
  if (listener_) listener_->stop();  // no connection handed to a server that is stopping
  server_->Shutdown(std::chrono::system_clock::now() + grace);
  server_->Wait();
  server_.reset();
}

}  // namespace mcp::broker
