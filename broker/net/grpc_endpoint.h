// GrpcEndpoint: the broker's gRPC server on options.listen, serving one service.
// - TLS from tls_cert/tls_key, client certificates required and verified with tls_ca (mTLS);
//   a CA without a certificate and key, or one of the pair alone, is a usage error.
// - TCP connections are accepted by our Listener (listener.h), not gRPC's: gRPC's own accept
//   loop stops for good after one EMFILE. A unix:PATH socket is made 0600, or 0660 and
//   socket_group's, so who may connect is who may write it; an unknown group fails before
//   anything listens.
// - A handshake must finish within handshake_timeout; an idle connection closes after
//   connection_idle (gRPC's defaults: 120 s and never).
// Throws mcp::Error (usage for bad options, runtime when the address cannot be bound).
#pragma once
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>

#include "broker/options.h"
#include "broker/net/listener.h"

namespace mcp::broker {

class GrpcEndpoint {
 public:
  GrpcEndpoint(const BrokerOptions& options, grpc::Service* service);
  ~GrpcEndpoint();

  int port() const { return port_; }
  // Not ok while new connections are refused or cannot be accepted.
  ListenerHealth health() const;
  // Accepts nothing more, lets calls run for `grace`, cancels the rest, waits for the server.
  void stop(std::chrono::milliseconds grace);

 private:
  std::unique_ptr<Listener> listener_;  // TCP; null on a unix socket (gRPC's own listener)
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor_;  // listener_'s connections into server_
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace mcp::broker
