#include "core/ps/proxy.hpp"

#include <algorithm>
#include <utility>

namespace apiary::core::ps {

ProxyRead ProxyCache::read(std::int32_t replica, const std::string& variable, std::int64_t step) {
  Entry& e = entries_[variable];
  // The copy was refreshed for this step (or a later one): serve it locally.
  if (e.step >= step) return ProxyRead{ProxyOutcome::hit, e.version, e.values};
  e.waiters.push_back(Waiter{replica, step});
  // A pull is under way: wait for it (a later step is pulled when it lands).
  if (e.pending >= 0) return ProxyRead{ProxyOutcome::wait, 0, {}};
  // First reader of a new step: one pull for the whole node.
  e.pending = step;
  ++pulls_;
  return ProxyRead{ProxyOutcome::pull, 0, {}};
}

Result<ProxyRefresh> ProxyCache::on_refresh(const std::string& variable, std::int64_t step,
                                                         std::int64_t version, std::vector<float> values) {
  auto it = entries_.find(variable);
  if (it == entries_.end() || it->second.pending != step) {
    return make_error(errc::protocol,
                      "proxy {}: expected a refresh for the pull under way (step {}), got one for step {}; "
                      "deliver only answers to pulls the proxy asked for",
                      variable, it == entries_.end() ? -1 : it->second.pending, step);
  }
  Entry& e = it->second;
  e.step = step;
  e.version = version;
  e.values = std::make_shared<const std::vector<float>>(std::move(values));
  e.pending = -1;
  ProxyRefresh out;
  std::vector<Waiter> still;
  for (const auto& w : e.waiters) {
    if (w.step <= e.step) {
      out.released.push_back(ProxyRelease{w.replica, w.step, e.version, e.values});
    } else {
      still.push_back(w);
      out.pull_step = std::max(out.pull_step, w.step);
    }
  }
  e.waiters = std::move(still);
  if (out.pull_step >= 0) {
    e.pending = out.pull_step;
    ++pulls_;
  }
  return out;
}

void ProxyCache::on_failed(const std::string& variable) {
  auto it = entries_.find(variable);
  if (it == entries_.end()) return;
  it->second.pending = -1;
  it->second.waiters.clear();
}

}  // namespace apiary::core::ps
