#include "forward/channel.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>
#include <sys/stat.h>

#include <fmt/format.h>

#include "common/error.h"
#include "common/setting_names.h"

namespace mcp {

std::string read_token_file(const std::string& path) {
  if (path.empty()) return "";
  // Whoever reads the token publishes (or subscribes) as us: refused as ssh refuses a key
  // others can read. stat(), not lstat(): a Secret's projected file is reached by a link.
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && (st.st_mode & S_IROTH))
    throw usage_error(fmt::format("token file '{}' is readable by every user (mode {:04o}): chmod o-r, e.g. 0600",
                                  path, st.st_mode & 07777));
  const std::string text = read_text_file(path, "token file");
  const std::string line = text.substr(0, text.find('\n'));
  const auto begin = line.find_first_not_of(" \t\r");
  if (begin == std::string::npos) throw usage_error("token file '" + path + "' is empty");
  const auto end = line.find_last_not_of(" \t\r");
  return line.substr(begin, end - begin + 1);
}

std::shared_ptr<grpc::Channel> make_channel(const std::string& address, const TlsFiles& tls,
                                            bool gzip, int receive_window_bytes) {
  grpc::ChannelArguments args;
  if (receive_window_bytes > 0) {
    args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
    args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, receive_window_bytes);
  }
  if (gzip) args.SetCompressionAlgorithm(GRPC_COMPRESS_GZIP);
  // Reconnect quickly after a broker restart; the forwarder does its own backoff on top.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetMaxReceiveMessageSize(64 << 20);
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (tls.enabled()) {
    grpc::SslCredentialsOptions ssl;
    if (!tls.ca.empty()) ssl.pem_root_certs = read_text_file(tls.ca, "TLS CA");
    if (!tls.cert.empty() || !tls.key.empty()) {
      if (tls.cert.empty() || tls.key.empty())
        throw usage_error("mTLS needs both " + setting_name(Setting::kTlsClientCert));
      ssl.pem_cert_chain = read_text_file(tls.cert, "TLS certificate");
      ssl.pem_private_key = read_text_file(tls.key, "TLS key");
    }
    creds = grpc::SslCredentials(ssl);
  } else {
    creds = grpc::InsecureChannelCredentials();
  }
  return grpc::CreateCustomChannel(address, creds, args);
}

void add_token(grpc::ClientContext& context, const std::string& token) {
  if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
}

}  // namespace mcp
