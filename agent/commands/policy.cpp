#include "commands/policy.h"

#include <cstdio>
#include <memory>

#include "commands/subscribe.h"
#include "common/error.h"
#include "common/sampling_bounds.h"
#include "common/trace_id_prefix.h"
#include "forward/channel.h"
#include "forward/forwarder.h"
#include "mcp/v1/sampling.grpc.pb.h"

namespace mcp::commands {
namespace {

struct PolicyFlags {
  std::string broker;
  std::string service, probe, trace_id_prefix;
  bool trace_id_prefix_given = false;  // an empty one is no prefix rule: refused, not a plain policy
  double sampling_rate = 0, target_qps = 0;
  TlsFiles tls;
  std::string token_file;
};

std::unique_ptr<mcp::v1::Sampling::Stub> connect(const PolicyFlags& f, grpc::ClientContext& ctx) {
  if (!f.token_file.empty()) add_token(ctx, read_token_file(f.token_file));
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return mcp::v1::Sampling::NewStub(make_channel(f.broker, f.tls, false));
}

void print(const mcp::v1::Policy& p) {
  std::printf("%s\n", policy_line(p.service(), p.probe(), p.sampling_rate(), p.target_qps(), p.trace_id_prefix()).c_str());
}

int apply(const PolicyFlags& f) {
  if ((f.sampling_rate != 0) == (f.target_qps != 0))
    throw usage_error("give exactly one of --sampling-rate or --target-qps");
  if (f.sampling_rate != 0 && !valid_sampling_rate(f.sampling_rate))
    throw usage_error(std::string("--sampling-rate must be in ") + kSamplingRateRange);
  if (f.target_qps != 0 && !valid_target_qps(f.target_qps))
    throw usage_error(std::string("--target-qps must be in ") + kTargetQpsRange);
  std::string prefix;
  if (f.trace_id_prefix_given) {
    const auto parsed = parse_trace_id_prefix(f.trace_id_prefix);
    if (!parsed) throw usage_error("--trace-id-prefix: " + trace_id_prefix_error(f.trace_id_prefix));
    prefix = parsed->digits;
  }
  mcp::v1::Policy policy;
  policy.set_trace_id_prefix(prefix);
  policy.set_service(f.service);
  policy.set_probe(f.probe);
  policy.set_sampling_rate(f.sampling_rate);
  policy.set_target_qps(f.target_qps);
  grpc::ClientContext ctx;
  mcp::v1::ApplyPolicyReply reply;
  const auto status = connect(f, ctx)->ApplyPolicy(&ctx, policy, &reply);
  if (!status.ok()) throw runtime_error("broker " + f.broker + " refused the policy: " + status.error_message());
  print(reply.stored());
  std::printf("pushed to %u connected agent(s)\n", reply.pushed_to_agents());
  return 0;
}

int list(const PolicyFlags& f) {
  grpc::ClientContext ctx;
  mcp::v1::PolicyList reply;
  const auto status = connect(f, ctx)->ListPolicies(&ctx, {}, &reply);
  if (!status.ok()) throw runtime_error("broker " + f.broker + ": " + status.error_message());
  for (const auto& p : reply.policies()) print(p);
  return 0;
}

void add_connection_flags(CLI::App* cmd, PolicyFlags& f) {
  cmd->add_option("--broker", f.broker, "mcp-broker HOST:PORT")->required();
  cmd->add_option("--tls-ca", f.tls.ca, "CA of the broker's certificate (enables TLS)");
  cmd->add_option("--tls-cert", f.tls.cert, "client certificate for mTLS");
  cmd->add_option("--tls-key", f.tls.key, "client key for mTLS");
  cmd->add_option("--token-file", f.token_file, "bearer token (first line of the file)");
}

}  // namespace

void add_policy_command(CLI::App& app, CommandAction& action) {
  auto flags = std::make_shared<PolicyFlags>();
  auto* cmd = app.add_subcommand("policy", "Set or list the sampling policies a broker pushes to agents");
  cmd->require_subcommand(1);
  auto* apply_cmd = cmd->add_subcommand("apply", "Store a policy and push it to every connected agent");
  add_connection_flags(apply_cmd, *flags);
  apply_cmd->add_option("--service", flags->service, "service it applies to (default: every service)");
  apply_cmd->add_option("--probe", flags->probe, "probe name or symbol (default: every probe)");
  apply_cmd->add_option("--sampling-rate", flags->sampling_rate, "fixed keep probability, 0 < R <= 1");
  apply_cmd->add_option("--target-qps", flags->target_qps, "kept events per second to steer each probe to");
  auto* prefix = apply_cmd->add_option("--trace-id-prefix", flags->trace_id_prefix,
                                       "a prefix rule: the rate or target applies to the trace ids starting with "
                                       "these hex digits (1-32), on probes with a trace-id argument; other ids keep "
                                       "the probe's rate");
  apply_cmd->callback([flags, prefix, &action] {
    flags->trace_id_prefix_given = prefix->count() > 0;
    use_setting_spelling(broker_client_flag_for);
    action = [flags] { return apply(*flags); };
  });
  auto* list_cmd = cmd->add_subcommand("list", "Print the stored policies");
  add_connection_flags(list_cmd, *flags);
  list_cmd->callback([flags, &action] {
    use_setting_spelling(broker_client_flag_for);
    action = [flags] { return list(*flags); };
  });
}

}  // namespace mcp::commands
