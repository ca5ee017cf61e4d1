#include "sim/network.hpp"

namespace apiary::sim {

Status validate(const LinkModel& link) {
  if (link.latency < Duration::zero()) {
    return make_error(errc::invalid_argument,
                      "link latency must be >= 0 ns, got {} ns; set LinkModel::latency",
                      link.latency.count());
  }
  if (link.jitter < Duration::zero()) {
    return make_error(errc::invalid_argument,
                      "link jitter must be >= 0 ns, got {} ns; set LinkModel::jitter",
                      link.jitter.count());
  }
  if (!(link.loss >= 0.0 && link.loss <= 1.0)) {
    return make_error(errc::invalid_argument,
                      "link loss must be a probability in [0, 1], got {}; set LinkModel::loss",
                      link.loss);
  }
  return ok_status();
}

Status Network::set_default(LinkModel link) {
  if (auto st = validate(link); !st) return st;
  default_ = link;
  return ok_status();
}

Status Network::set_link(const PeerAddr& a, const PeerAddr& b, LinkModel link) {
  if (auto st = validate(link); !st) return st;
  overrides_[{a, b}] = link;
  overrides_[{b, a}] = link;
  return ok_status();
}

Status Network::set_one_way(const PeerAddr& from, const PeerAddr& to, LinkModel link) {
  if (auto st = validate(link); !st) return st;
  overrides_[{from, to}] = link;
  return ok_status();
}

LinkModel Network::link(const PeerAddr& from, const PeerAddr& to) const {
  if (!overrides_.empty()) {
    auto it = overrides_.find({from, to});
    if (it != overrides_.end()) return it->second;
  }
  if (rule_) {
    LinkModel model = rule_(from, to);
    if (validate(model).ok()) return model;
  }
  return default_;
}

std::optional<Duration> Network::transit(const PeerAddr& from, const PeerAddr& to,
                                         Rng& rng) const {
  const LinkModel model = link(from, to);
  if (rng.chance(model.loss)) return std::nullopt;
  Duration delay = model.latency;
  if (model.jitter > Duration::zero()) {
    delay += Duration(static_cast<Duration::rep>(
        rng.uniform(static_cast<std::uint64_t>(model.jitter.count()) + 1)));
  }
  return delay;
}

}  // namespace apiary::sim
