#include "sim/cost_profile.hpp"

#include <fmt/format.h>

#include <cmath>
#include <variant>

#include "core/strategy/document.hpp"
#include "core/strategy/json_reader.hpp"

namespace apiary::sim {

namespace cs = core::strategy;

namespace {

/// The profile's numeric fields, in the order they are written.
struct Field {
  const char* name;
  double CostProfile::*value;
};
constexpr Field k_fields[] = {
    {"latency_us", &CostProfile::latency_us}, {"message_us", &CostProfile::message_us},
    {"byte_ns", &CostProfile::byte_ns},       {"memcpy_gbps", &CostProfile::memcpy_gbps},
    {"sum_ns", &CostProfile::sum_ns},         {"sgd_ns", &CostProfile::sgd_ns},
    {"adam_ns", &CostProfile::adam_ns},       {"gradient_ns", &CostProfile::gradient_ns},
    {"gradient_call_ns", &CostProfile::gradient_call_ns}, {"loss_ns", &CostProfile::loss_ns},
    {"allreduce_ns", &CostProfile::allreduce_ns},         {"allreduce_fp16_ns", &CostProfile::allreduce_fp16_ns},
    {"allreduce_fp16_ef_ns", &CostProfile::allreduce_fp16_ef_ns}, {"ps_ns", &CostProfile::ps_ns},
    {"ps_sparse_ns", &CostProfile::ps_sparse_ns},         {"allreduce_sparse_ns", &CostProfile::allreduce_sparse_ns},
    {"large_message_us", &CostProfile::large_message_us},         {"large_message_bytes", &CostProfile::large_message_bytes},
    {"secure_byte_ns", &CostProfile::secure_byte_ns},     {"idle_message_us", &CostProfile::idle_message_us},
    {"idle_cpu_us_per_s", &CostProfile::idle_cpu_us_per_s}, {"partition_ns", &CostProfile::partition_ns},
    {"sparse_gradient_ns", &CostProfile::sparse_gradient_ns},
    {"sparse_gradient_call_ns", &CostProfile::sparse_gradient_call_ns},
    {"sparse_loss_ns", &CostProfile::sparse_loss_ns},
    {"allreduce_sparse_base_ns", &CostProfile::allreduce_sparse_base_ns},
    {"allreduce_sparse_row_ns", &CostProfile::allreduce_sparse_row_ns},
    {"ps_sparse_base_ns", &CostProfile::ps_sparse_base_ns},
    {"ps_sparse_row_ns", &CostProfile::ps_sparse_row_ns},
};

}  // namespace

CostProfile CostProfile::encrypted() const {
  CostProfile p = *this;
  p.byte_ns += secure_byte_ns;
  return p;
}

core::Duration CostProfile::message(std::size_t bytes) const {
  const double large = static_cast<double>(bytes) >= large_message_bytes ? large_message_us : 0.0;
  return work(1.0, (message_us + large) * 1e3) + work(static_cast<double>(bytes), byte_ns);
}

core::Duration CostProfile::sending(const Sent& sent) const {
  return work(static_cast<double>(sent.messages), message_us * 1e3) +
         work(static_cast<double>(sent.large), large_message_us * 1e3) + work(static_cast<double>(sent.bytes), byte_ns);
}

core::Duration CostProfile::gradient(std::size_t batch, std::size_t features) const {
  const auto f = static_cast<double>(features);
  return work(f, gradient_call_ns) + work(f * static_cast<double>(batch), gradient_ns);
}

core::Duration CostProfile::sparse_gradient(std::size_t nonzeros, std::size_t features) const {
  return work(static_cast<double>(features), sparse_gradient_call_ns) +
         work(static_cast<double>(nonzeros), sparse_gradient_ns);
}

core::Duration CostProfile::work(double count, double ns_each) {
  return core::Duration(static_cast<core::Duration::rep>(std::llround(count * ns_each)));
}

Sent sent_by(const core::Effects& effects, std::size_t large_bytes, const std::function<bool(const core::Effect&)>& stays) {
  Sent out;
  auto add = [&out, large_bytes](std::size_t bytes) {
    ++out.messages;
    out.bytes += bytes;
    if (bytes >= large_bytes) ++out.large;
  };
  for (const auto& effect : effects) {
    if (stays && stays(effect)) continue;
    if (const auto* call = std::get_if<core::Call>(&effect)) {
      add(call->request.size() + call->body.size() + call->tail.size());
    } else if (const auto* send = std::get_if<core::Send>(&effect)) {
      add(send->message.size() + send->body.size() + send->tail.size());
    } else if (const auto* reply = std::get_if<core::Reply>(&effect)) {
      add((reply->response.ok() ? reply->response->size() : 0) + reply->body.size() + reply->tail.size());
    }
  }
  return out;
}

std::string to_json(const CostProfile& p) {
  std::string out = fmt::format("{{\n  \"machine\": \"{}\",\n  \"cores\": {}", p.machine, p.cores);
  for (const auto& f : k_fields) out += fmt::format(",\n  \"{}\": {:.6g}", f.name, p.*(f.value));
  return out + "\n}\n";
}

Result<CostProfile> parse_cost_profile(std::string_view json, std::string_view source) {
  auto doc = cs::parse_json(json, source);
  if (!doc) return doc.error();
  const cs::DocumentReader read{std::string(source)};
  std::vector<std::string_view> allowed{"machine", "cores"};
  for (const auto& f : k_fields) allowed.push_back(f.name);
  if (auto st = read.expect_fields(*doc, "profile", allowed); !st) return st.error();
  CostProfile p;
  if (const auto* machine = doc->find("machine")) {
    auto text = read.string(*machine, "machine");
    if (!text) return text.error();
    p.machine = *text;
  }
  const auto* cores = doc->find("cores");
  if (cores == nullptr) return read.error(*doc, "cores", "expected the machine's processor count, got none");
  auto n = read.integer(*cores, "cores", 1, 4096);
  if (!n) return n.error();
  p.cores = static_cast<std::size_t>(*n);
  for (const auto& f : k_fields) {
    const auto* node = doc->find(f.name);
    if (node == nullptr) return read.error(*doc, f.name, "expected a number >= 0, got none; run apiary sim calibrate");
    auto v = read.number(*node, f.name);
    if (!v) return v.error();
    if (*v < 0) return read.error(*node, f.name, fmt::format("expected a number >= 0, got {}", *v));
    p.*(f.value) = *v;
  }
  return p;
}

}  // namespace apiary::sim
