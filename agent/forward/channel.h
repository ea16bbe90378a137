// gRPC client plumbing shared by the forwarder and the subscribe command: channel creation with
// optional TLS / mTLS and gzip, and the bearer token read from a file. Throws mcp::Error (usage)
// for unreadable credential files so the CLI reports them as bad usage.
#pragma once
#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>

#include <memory>
#include <string>

#include "common/text_file.h"  // read_text_file, for the callers of this header
#include "forward/forwarder.h"

namespace mcp {


// First line of the file, surrounding whitespace removed; empty path gives "". A file every
// user can read is refused (mcp::Error usage), as ssh refuses such a key.
std::string read_token_file(const std::string& path);

// receive_window_bytes > 0 fixes the HTTP/2 stream window (no BDP growth), so a consumer that
// stops reading pushes back on the sender after that many bytes.
std::shared_ptr<grpc::Channel> make_channel(const std::string& address, const TlsFiles& tls,
                                            bool gzip, int receive_window_bytes = 0);

// Adds "authorization: Bearer <token>" when the token is not empty.
void add_token(grpc::ClientContext& context, const std::string& token);

}  // namespace mcp
