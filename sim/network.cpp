#include "sim/network.hpp"

#include <algorithm>

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
  if (!(link.bandwidth >= 0.0)) {
    return make_error(errc::invalid_argument,
                      "link bandwidth must be >= 0 bytes/s (0: unlimited), got {}; set LinkModel::bandwidth",
                      link.bandwidth);
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

std::optional<Duration> Network::draw(const LinkModel& model, Rng& rng) {
  if (rng.chance(model.loss)) return std::nullopt;
  Duration delay = model.latency;
  if (model.jitter > Duration::zero()) {
    delay += Duration(static_cast<Duration::rep>(rng.uniform(static_cast<std::uint64_t>(model.jitter.count()) + 1)));
  }
  return delay;
}

std::optional<Duration> Network::transit(const PeerAddr& from, const PeerAddr& to, Rng& rng) const {
  return draw(link(from, to), rng);
}

std::optional<Duration> Network::transit(const PeerAddr& from, const PeerAddr& to, std::size_t bytes,
                                         TimePoint now, Rng& rng) {
  if (!partitions_.empty() && partitioned(from, to, now)) return std::nullopt;
  const LinkModel model = link(from, to);
  const auto delay = draw(model, rng);
  if (!delay) return delay;
  const TimePoint arrive = std::max(occupy(model, from, to, bytes, now) + *delay, clog_end(from, to, now));
  return arrive - now;
}

TimePoint Network::occupy(const PeerAddr& from, const PeerAddr& to, std::size_t bytes, TimePoint now) {
  return occupy(link(from, to), from, to, bytes, now);
}

TimePoint Network::occupy(const LinkModel& model, const PeerAddr& from, const PeerAddr& to, std::size_t bytes,
                          TimePoint now) {
  if (model.bandwidth <= 0.0) return now;
  // The message waits for the messages before it, then occupies the link.
  TimePoint& free = busy_[{from, to}];
  const TimePoint start = std::max(now, free);
  free = start + Duration(static_cast<Duration::rep>(static_cast<double>(bytes) / model.bandwidth * 1e9));
  return free;
}

TimePoint Network::clog_end(const PeerAddr& from, const PeerAddr& to, TimePoint now) {
  if (clogged_.empty()) return now;
  auto it = clogged_.find({from, to});
  if (it == clogged_.end()) return now;
  if (it->second <= now) {
    clogged_.erase(it);
    return now;
  }
  return it->second + link(from, to).latency;
}

void Network::clog(const PeerAddr& from, const PeerAddr& to, TimePoint until) {
  TimePoint& end = clogged_[{from, to}];
  end = std::max(end, until);
}

void Network::partition(std::vector<PeerAddr> a, std::vector<PeerAddr> b, TimePoint until) {
  partitions_.push_back(Partition{{a.begin(), a.end()}, {b.begin(), b.end()}, until});
}

bool Network::partitioned(const PeerAddr& from, const PeerAddr& to, TimePoint now) const {
  for (const auto& p : partitions_) {
    if (p.until <= now) continue;
    if ((p.a.count(from) != 0 && p.b.count(to) != 0) || (p.b.count(from) != 0 && p.a.count(to) != 0)) return true;
  }
  return false;
}

}  // namespace apiary::sim
