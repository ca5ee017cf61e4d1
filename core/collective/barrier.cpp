#include "core/collective/barrier.hpp"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

namespace apiary::core::collective {

Barrier::Barrier(BarrierConfig config)
    : config_(std::move(config)),
      answered_(config_.peers.size(), false),
      peer_level_(config_.peers.size(), 0),
      next_call_(config_.id_base + 2 + config_.peers.size()) {}

bool Barrier::owns_timer(TimerId id) const {
  return id >= config_.id_base && id <= config_.id_base + config_.peers.size();
}

Call Barrier::ask(TimePoint now, std::size_t peer) {
  const CallId id = next_call_++;
  calls_[id] = peer;
  // The ask lives until the round's deadline: a member behind holds it, and its answer is
  // the only word this member gets from it (having been asked, it does not ask back, and
  // may leave once everyone answered it). An ask that timed out earlier would leave this
  // member re-asking one that is gone.
  return unary_call(id, config_.peers[peer], config_.handle, fmt::format("{} {}", round_level_, config_.self),
                    std::max(config_.call_timeout, deadline_ - now));
}

Effects Barrier::start(TimePoint now, std::uint64_t level, TimePoint deadline) {
  Effects fx;
  // A new round forgets the old one's calls and retries (their answers are ignored).
  for (const auto& [call, peer] : calls_) fx.push_back(Cancel{call, "barrier round replaced"});
  calls_.clear();
  for (std::size_t p = 0; p < config_.peers.size(); ++p) fx.push_back(CancelTimer{config_.id_base + p});
  round_level_ = level;
  deadline_ = deadline;
  finished_ = false;
  status_ = ok_status();
  // A member that already asked at this level or above has proved it got there.
  for (std::size_t p = 0; p < answered_.size(); ++p) answered_[p] = p == config_.self || peer_level_[p] > level;
  // Ask every other member; the round ends when all answered or at the deadline.
  for (std::size_t p = 0; p < config_.peers.size(); ++p) {
    if (!answered_[p]) fx.push_back(ask(now, p));
  }
  fx.push_back(SetTimer{config_.id_base + config_.peers.size(), deadline});
  maybe_finish(fx);
  return fx;
}

Effects Barrier::reach(std::uint64_t level) {
  Effects fx;
  if (level > own_level_) own_level_ = level;
  // Answer every held ask the new level satisfies.
  while (!held_.empty() && held_.begin()->first <= own_level_) {
    fx.push_back(Reply{held_.begin()->second, std::to_string(own_level_), true});
    held_.erase(held_.begin());
  }
  return fx;
}

Effects Barrier::on_request(TimePoint, RequestId id, const std::string& body) {
  // Body: "<level> <rank of the asking member>".
  std::uint64_t level = 0;
  std::uint64_t rank = 0;
  const char* const last = body.data() + body.size();
  const auto l = std::from_chars(body.data(), last, level);
  const bool space = l.ec == std::errc{} && l.ptr != last && *l.ptr == ' ';
  const auto r = space ? std::from_chars(l.ptr + 1, last, rank) : l;
  if (!space || r.ec != std::errc{} || r.ptr != last || rank >= config_.peers.size()) {
    return {Reply{id,
                  make_error(errc::invalid_argument,
                             "collective barrier: expected '<level> <rank below {}>' in decimal, got '{}'; is the "
                             "caller another program on this handle?",
                             config_.peers.size(), body.substr(0, 32)),
                  true}};
  }
  Effects fx;
  // The asker reached `level` itself: it need not be asked back (it may be gone by then).
  auto& known = peer_level_[static_cast<std::size_t>(rank)];
  known = std::max(known, level + 1);
  if (!finished_ && known > round_level_) {
    answered_[static_cast<std::size_t>(rank)] = true;
    maybe_finish(fx);
  }
  if (level <= own_level_) {
    fx.insert(fx.begin(), Reply{id, std::to_string(own_level_), true});
  } else {
    held_.emplace(level, id);
  }
  return fx;
}

void Barrier::maybe_finish(Effects& fx) {
  if (finished_) return;
  for (bool a : answered_) {
    if (!a) return;
  }
  finish(fx, ok_status());
}

Effects Barrier::on_response(TimePoint now, CallId call, const Result<std::string>& result) {
  Effects fx;
  auto it = calls_.find(call);
  if (it == calls_.end() || finished_) return fx;
  const std::size_t peer = it->second;
  calls_.erase(it);
  if (result || answered_[peer]) {
    answered_[peer] = true;
    maybe_finish(fx);
    return fx;
  }
  if (is_refusal(result.error().code)) {  // there, but it refused us: asking again will not help
    finish(fx, make_error(result.error().code, "collective barrier at level {}: rank {} ({}) refused the connection: {}",
                          round_level_, peer, config_.peers[peer].multiaddr(), result.error().message));
    return fx;
  }
  // Not listening yet, or the ask timed out while the member was still behind: ask again.
  if (now + config_.retry < deadline_) fx.push_back(SetTimer{config_.id_base + peer, now + config_.retry});
  return fx;
}

Effects Barrier::on_timer(TimePoint now, TimerId id) {
  Effects fx;
  if (finished_ || !owns_timer(id)) return fx;
  const std::size_t which = static_cast<std::size_t>(id - config_.id_base);
  if (which < config_.peers.size()) {
    if (!answered_[which]) fx.push_back(ask(now, which));
    return fx;
  }
  // The deadline: name every member that never answered.
  std::string missing;
  for (std::size_t p = 0; p < answered_.size(); ++p) {
    if (!answered_[p]) missing += (missing.empty() ? "" : ", ") + std::to_string(p) + " (" + config_.peers[p].multiaddr() + ")";
  }
  finish(fx, make_error(errc::deadline_exceeded,
                        "collective barrier at level {}: expected every member to reach it, but rank(s) {} did not "
                        "answer in time; are they running, and with the same --peers?",
                        round_level_, missing));
  (void)now;
  return fx;
}

void Barrier::finish(Effects& fx, Status status) {
  finished_ = true;
  status_ = std::move(status);
  for (const auto& [call, peer] : calls_) fx.push_back(Cancel{call, "barrier round over"});
  calls_.clear();
  for (std::size_t p = 0; p <= config_.peers.size(); ++p) fx.push_back(CancelTimer{config_.id_base + p});
}

}  // namespace apiary::core::collective
