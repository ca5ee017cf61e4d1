#include "core/strategy/slurm.hpp"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

namespace apiary::core::strategy {

namespace {

constexpr std::size_t k_max_hosts = 65536;
constexpr std::size_t k_max_host_name = 255;  ///< a DNS name's length

/// A whole decimal number (digits only).
bool number(std::string_view text, std::int64_t& out) {
  if (text.empty() || text.size() > 9) return false;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc{} && ptr == text.data() + text.size();
}

/// Calls `each` with every comma-separated part of `text` (an empty text is one empty
/// part), stopping at the first error.
Status for_each_part(std::string_view text, const std::function<Status(std::string_view)>& each) {
  std::size_t at = 0;
  while (at <= text.size()) {
    const auto comma = std::min(text.find(',', at), text.size());
    if (auto st = each(text.substr(at, comma - at)); !st) return st;
    at = comma + 1;
  }
  return ok_status();
}

/// The texts one bracket group stands for: "01-03,07" -> 01 02 03 07.
Result<std::vector<std::string>> group(std::string_view inside, std::string_view item) {
  std::vector<std::string> out;
  auto parsed = for_each_part(inside, [&](std::string_view part) -> Status {
    const auto dash = part.find('-');
    const std::string_view low = part.substr(0, dash);
    const std::string_view high = dash == std::string_view::npos ? low : part.substr(dash + 1);
    std::int64_t a = 0;
    std::int64_t b = 0;
    if (!number(low, a) || !number(high, b) || b < a) {
      return make_error(errc::invalid_argument,
                        "host list item '{}': expected numbers or ranges LOW-HIGH (LOW <= HIGH) in brackets, got '{}'",
                        item, part);
    }
    if (static_cast<std::size_t>(b - a) >= k_max_hosts - out.size()) {
      return make_error(errc::invalid_argument, "host list item '{}': more than {} hosts", item, k_max_hosts);
    }
    for (std::int64_t n = a; n <= b; ++n) out.push_back(fmt::format("{:0{}}", n, low.size()));
    return ok_status();
  });
  if (!parsed) return parsed.error();
  return out;
}

Error too_long(std::string_view item) {
  return make_error(errc::invalid_argument, "host list item '{:.64}...': a host name longer than {} characters", item,
                    k_max_host_name);
}

/// The hosts of one item: its literal parts and bracket groups, in every combination.
Status expand_item(std::string_view item, std::vector<std::string>& hosts) {
  std::vector<std::string> names{""};
  std::size_t longest = 0;  // the longest name's length so far
  std::size_t at = 0;
  while (at < item.size()) {
    const auto open = item.find('[', at);
    const std::string_view literal = item.substr(at, open == std::string_view::npos ? item.size() - at : open - at);
    if (literal.find(']') != std::string_view::npos) {
      return make_error(errc::invalid_argument, "host list item '{}': a ']' without its '['", item);
    }
    longest += literal.size();
    if (longest > k_max_host_name) return too_long(item);
    for (auto& n : names) n.append(literal);
    if (open == std::string_view::npos) break;
    const auto close = item.find(']', open);
    if (close == std::string_view::npos || close == open + 1) {
      return make_error(errc::invalid_argument, "host list item '{}': expected [NUMBERS] after position {}", item, open);
    }
    auto values = group(item.substr(open + 1, close - open - 1), item);
    if (!values) return values.error();
    std::size_t widest = 0;
    for (const auto& v : *values) widest = std::max(widest, v.size());
    longest += widest;
    if (longest > k_max_host_name) return too_long(item);
    std::vector<std::string> next;
    for (const auto& n : names) {
      for (const auto& v : *values) {
        if (next.size() + hosts.size() >= k_max_hosts) {
          return make_error(errc::invalid_argument, "host list item '{}': more than {} hosts", item, k_max_hosts);
        }
        next.push_back(n + v);
      }
    }
    names = std::move(next);
    at = close + 1;
  }
  for (auto& n : names) {
    if (n.empty()) return make_error(errc::invalid_argument, "host list: an empty host name in '{}'", item);
    hosts.push_back(std::move(n));
  }
  return ok_status();
}

}  // namespace

Result<std::vector<std::string>> expand_hostlist(std::string_view list) {
  std::vector<std::string> hosts;
  std::size_t at = 0;
  int depth = 0;
  std::size_t start = 0;
  // Items are split at the commas outside brackets.
  for (; at <= list.size(); ++at) {
    const char c = at < list.size() ? list[at] : ',';
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c != ',' || depth > 0) continue;
    if (auto st = expand_item(list.substr(start, at - start), hosts); !st) return st.error();
    start = at + 1;
  }
  if (depth != 0) return make_error(errc::invalid_argument, "host list '{}': unbalanced brackets", list);
  return hosts;
}

Result<std::vector<std::int64_t>> expand_tasks_per_node(std::string_view counts) {
  std::vector<std::int64_t> out;
  auto parsed = for_each_part(counts, [&](std::string_view part) -> Status {
    const auto paren = part.find("(x");
    std::int64_t tasks = 0;
    std::int64_t times = 1;
    const bool ok = number(part.substr(0, paren), tasks) &&
                    (paren == std::string_view::npos ||
                     (part.back() == ')' && number(part.substr(paren + 2, part.size() - paren - 3), times)));
    if (!ok || tasks < 1 || times < 1 || out.size() + static_cast<std::size_t>(times) > k_max_hosts) {
      return make_error(errc::invalid_argument,
                        "SLURM_TASKS_PER_NODE: expected counts such as 2(x3),1 (each >= 1), got '{}' in '{}'", part,
                        counts);
    }
    out.insert(out.end(), static_cast<std::size_t>(times), tasks);
    return ok_status();
  });
  if (!parsed) return parsed.error();
  return out;
}

Result<std::string> slurm_resource_spec(const std::function<const char*(const char*)>& env, std::int64_t gpus_per_node) {
  const char* list = env("SLURM_JOB_NODELIST");
  if (list == nullptr || *list == '\0') list = env("SLURM_NODELIST");
  if (list == nullptr || *list == '\0') {
    return make_error(errc::invalid_argument,
                      "expected SLURM_JOB_NODELIST (or SLURM_NODELIST), got neither: run inside a Slurm allocation");
  }
  auto hosts = expand_hostlist(list);
  if (!hosts) return hosts.error();
  std::vector<std::int64_t> tasks(hosts->size(), 1);
  if (const char* t = env("SLURM_TASKS_PER_NODE"); t != nullptr && *t != '\0') {
    auto counts = expand_tasks_per_node(t);
    if (!counts) return counts.error();
    if (counts->size() != hosts->size()) {
      return make_error(errc::invalid_argument, "SLURM_TASKS_PER_NODE '{}' counts {} nodes, the node list '{}' {}", t,
                        counts->size(), list, hosts->size());
    }
    tasks = std::move(*counts);
  }
  std::string out = "# The Slurm allocation " + std::string(list) + ": one node per host, the first the chief.\nnodes:\n";
  for (std::size_t i = 0; i < hosts->size(); ++i) {
    out += fmt::format("  - address: {}\n", (*hosts)[i]);
    std::string ids;
    const std::int64_t n = gpus_per_node > 0 ? gpus_per_node : tasks[i];
    for (std::int64_t d = 0; d < n; ++d) ids += (d == 0 ? "" : ", ") + std::to_string(d);
    out += fmt::format("    {}: [{}]\n", gpus_per_node > 0 ? "gpus" : "cpus", ids);
    out += i == 0 ? "    chief: true\n" : "    ssh_config: slurm\n";
  }
  if (hosts->size() > 1) out += "ssh:\n  slurm: {}\n";
  return out;
}

}  // namespace apiary::core::strategy
