// parse_resource_spec: the YAML file -> NodeSpec/SshConfig -> ResourceSpec::make.
#include <limits>

#include "core/strategy/document.hpp"
#include "core/strategy/resource_spec.hpp"
#include "core/strategy/yaml_reader.hpp"

namespace apiary::core::strategy {
namespace {

Result<NodeSpec> read_node(const DocumentReader& r, const Document& node, const std::string& path) {
  if (auto s = r.expect_fields(node, path, {"address", "gpus", "cpus", "chief", "network_bandwidth", "ssh_config"}); !s) {
    return s.error();
  }
  NodeSpec n;
  const Document* address = node.find("address");
  if (address == nullptr) return r.error(node, path, "missing the field \"address\" (the node's IP address or host name)");
  auto a = r.string(*address, path + ".address");
  if (!a) return a.error();
  n.address = *a;
  for (auto [key, ids] : {std::pair{"gpus", &n.gpus}, std::pair{"cpus", &n.cpus}}) {
    const Document* d = node.find(key);
    if (d == nullptr || d->kind == Document::Kind::null) continue;
    auto list = r.integer_list(*d, path + "." + key, 0, std::numeric_limits<std::int32_t>::max());
    if (!list) return list.error();
    *ids = std::move(*list);
  }
  if (const Document* d = node.find("chief")) {
    auto b = r.boolean(*d, path + ".chief");
    if (!b) return b.error();
    n.chief = *b;
  }
  if (const Document* d = node.find("network_bandwidth")) {
    auto b = r.number(*d, path + ".network_bandwidth");
    if (!b) return b.error();
    if (*b <= 0) return r.error(*d, path + ".network_bandwidth", "expected a positive number of Gbit/s (default 1)");
    n.network_bandwidth_gbps = *b;
  }
  if (const Document* d = node.find("ssh_config")) {
    auto s = r.string(*d, path + ".ssh_config");
    if (!s) return s.error();
    n.ssh_config = *s;
  }
  return n;
}

Result<SshConfig> read_ssh(const DocumentReader& r, const std::string& name, const Document& node,
                           const std::string& path) {
  if (auto s = r.expect_fields(node, path, {"username", "port", "key_file", "python_venv", "shared_envs"}); !s) {
    return s.error();
  }
  SshConfig c;
  c.name = name;
  for (auto [key, field] : {std::pair{"username", &c.username}, std::pair{"key_file", &c.key_file},
                            std::pair{"python_venv", &c.python_venv}}) {
    if (const Document* d = node.find(key)) {
      auto s = r.string(*d, path + "." + key);
      if (!s) return s.error();
      *field = *s;
    }
  }
  if (const Document* d = node.find("port")) {
    auto p = r.integer(*d, path + ".port", 1, 65535);
    if (!p) return p.error();
    c.port = *p;
  }
  if (const Document* d = node.find("shared_envs")) {
    if (auto s = r.expect_map(*d, path + ".shared_envs"); !s) return s.error();
    for (const auto& [key, value] : d->fields) {
      auto v = r.string(value, path + ".shared_envs." + key);
      if (!v) return v.error();
      c.shared_envs.emplace_back(key, *v);
    }
  }
  return c;
}

}  // namespace

Result<ResourceSpec> parse_resource_spec(std::string_view text, std::string_view source) {
  auto doc = parse_yaml(text, source);
  if (!doc) return doc.error();
  const DocumentReader r{std::string(source)};
  if (auto s = r.expect_fields(*doc, "resource spec", {"nodes", "ssh"}); !s) return s.error();
  auto listed = r.required_list(*doc, "resource spec", "nodes", "missing the list \"nodes\"");
  if (!listed) return listed.error();
  const Document* nodes = *listed;
  std::vector<NodeSpec> specs;
  for (std::size_t i = 0; i < nodes->items.size(); ++i) {
    auto n = read_node(r, nodes->items[i], fmt::format("nodes[{}]", i));
    if (!n) return n.error();
    specs.push_back(std::move(*n));
  }
  std::vector<SshConfig> ssh;
  if (const Document* s = doc->find("ssh"); s != nullptr && s->kind != Document::Kind::null) {
    if (auto m = r.expect_map(*s, "ssh"); !m) return m.error();
    for (const auto& [name, entry] : s->fields) {
      auto c = read_ssh(r, name, entry, "ssh." + name);
      if (!c) return c.error();
      ssh.push_back(std::move(*c));
    }
  }
  auto spec = ResourceSpec::make(std::move(specs), std::move(ssh));
  if (!spec) return make_error(spec.error().code, "{}: {}", source, spec.error().message);
  return spec;
}

}  // namespace apiary::core::strategy
