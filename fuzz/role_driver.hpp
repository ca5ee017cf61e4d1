#pragma once
/// Drives a role (core/role.hpp) with inputs read off a fuzz input, as a host would with
/// a hostile swarm: after Start, each step the input chooses (RoleDriver::Action) delivers
/// a Request with fuzzed bytes on one of the role's handles, a fuzzed message on a
/// request it holds open, a fuzzed answer or message on a call it made, a timer it armed,
/// a peer going down, an answer to one of its Asks, a role-specific local call, or time
/// passing. What the role returns is tracked (calls, timers, asks, open requests) so that
/// later steps can answer it. make_seeds.cpp writes steps in the same format (write_*).
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/role.hpp"
#include "fuzz/fuzz_input.hpp"
#include "messages/identity/ed25519.hpp"
#include "messages/identity/peer_id.hpp"

namespace apiary::fuzz {

/// The made-up peers requests come from and PeerDown names: two plain addresses and one
/// naming a PeerID.
inline const std::vector<core::PeerAddr>& fuzz_peers() {
  static const std::vector<core::PeerAddr> peers = [] {
    std::vector<core::PeerAddr> out;
    for (const char* text : {"/ip4/10.0.0.2/tcp/4100", "/ip4/10.0.0.3/tcp/4100", "/ip4/10.0.0.4/tcp/4100"}) {
      auto addr = messages::PeerAddress::parse(text);
      if (!addr) __builtin_trap();
      out.push_back(*addr);
    }
    auto key = messages::Ed25519PrivateKey::from_seed(std::string(32, '\x07'));
    if (!key) __builtin_trap();
    out[2] = out[2].with_peer(messages::PeerId::from_public_key(key->public_key()));
    return out;
  }();
  return peers;
}

/// The step kinds, in the order of the input's choice byte.
enum class Action : std::uint8_t {
  request,          ///< handle index, peer index, body
  request_message,  ///< open request index, kind (0 message, 1 last, 2 error), message
  response,         ///< call index, kind (0 answer, else an error), bytes
  stream_message,   ///< streaming call index, message
  timer,            ///< armed timer index
  peer_down,        ///< peer index
  local_reply,      ///< ask index, then what the target's AskAnswer reads
  local_call,       ///< what the target's LocalCallMaker reads
  advance,          ///< 2-byte count of 10 ms steps
  count,
};

/// Answers a role's Ask from the input; the result of its LocalReply.
using AskAnswer = std::function<Result<core::Value>(const core::Ask&, FuzzInput&)>;
/// A local call of the role built from the input; nullopt for none.
using LocalCallMaker = std::function<std::optional<core::LocalCall>(FuzzInput&, core::OpId)>;

class RoleDriver {
 public:
  RoleDriver(core::Role& role, FuzzInput& in) : role_(role), in_(in), handles_(role.handles()) {}

  AskAnswer answer_ask;        ///< null: every Ask is answered with an error
  LocalCallMaker make_call;    ///< null: Action::local_call does nothing

  /// Start, then at most `max_steps` steps, fewer when the input ends first.
  void run(std::size_t max_steps = 48) {
    feed(core::Start{});
    for (std::size_t i = 0; i < max_steps && !in_.empty(); ++i) step();
  }

  /// Delivers `input` at the current time and tracks what comes back.
  void feed(core::Input input) { absorb(role_.on(now_, std::move(input))); }

  /// One step chosen by the input.
  void step() {
    switch (static_cast<Action>(in_.pick(static_cast<std::size_t>(Action::count)))) {
      case Action::request: {
        if (handles_.empty()) break;
        const std::string& handle = handles_[in_.pick(handles_.size())];
        const core::PeerAddr& from = fuzz_peers()[in_.pick(fuzz_peers().size())];
        const core::RequestId id = next_request_++;
        open_.insert(id);
        feed(core::Request{id, handle, from, Buffer::copy_of(in_.bytes())});
        break;
      }
      case Action::request_message: {
        if (open_.empty()) break;
        const core::RequestId id = nth(open_, in_.pick(open_.size()));
        const std::size_t kind = in_.pick(3);
        std::string body = in_.bytes();
        if (kind == 2) {
          open_.erase(id);
          feed(core::RequestMessage{id, make_error(errc::cancelled, "{}", body), true});
        } else {
          feed(core::RequestMessage{id, Buffer::copy_of(body), kind == 1});
        }
        break;
      }
      case Action::response: {
        if (calls_.empty()) break;
        const core::CallId id = nth_key(calls_, in_.pick(calls_.size()));
        const std::size_t kind = in_.pick(4);
        std::string body = in_.bytes();
        calls_.erase(id);
        if (kind == 0) {
          feed(core::Response{id, std::move(body)});
        } else {
          static constexpr errc k_errors[] = {errc::deadline_exceeded, errc::peer_down, errc::handler_error};
          feed(core::Response{id, Error{k_errors[kind - 1], std::move(body)}});
        }
        break;
      }
      case Action::stream_message: {
        std::vector<core::CallId> streams;
        for (const auto& [id, stream] : calls_) {
          if (stream) streams.push_back(id);
        }
        if (streams.empty()) break;
        const core::CallId id = streams[in_.pick(streams.size())];
        feed(core::StreamMessage{id, Buffer::copy_of(in_.bytes())});
        break;
      }
      case Action::timer: {
        if (timers_.empty()) break;
        const auto it = std::next(timers_.begin(), static_cast<std::ptrdiff_t>(in_.pick(timers_.size())));
        const core::TimerId id = it->first;
        if (it->second == core::TimePoint::max()) break;  // "never" (a saturated time): it does not fire
        if (it->second > now_) now_ = it->second;  // a timer fires at its time, not before
        timers_.erase(it);
        feed(core::TimerFired{id});
        break;
      }
      case Action::peer_down:
        feed(core::PeerDown{fuzz_peers()[in_.pick(fuzz_peers().size())]});
        break;
      case Action::local_reply: {
        if (asks_.empty()) break;
        const auto it = std::next(asks_.begin(), static_cast<std::ptrdiff_t>(in_.pick(asks_.size())));
        const core::Ask ask = it->second;
        asks_.erase(it);
        Result<core::Value> result =
            answer_ask ? answer_ask(ask, in_) : Result<core::Value>(make_error(errc::unavailable, "no answer"));
        feed(core::LocalReply{ask.op, std::move(result)});
        break;
      }
      case Action::local_call: {
        if (!make_call) break;
        if (auto call = make_call(in_, next_op_++)) feed(std::move(*call));
        break;
      }
      case Action::advance:
      case Action::count: {
        const core::Duration step = std::chrono::milliseconds(10 * in_.number(2));
        now_ = now_ > core::TimePoint::max() - step ? core::TimePoint::max() : now_ + step;  // saturated
        break;
      }
    }
  }

  [[nodiscard]] core::TimePoint now() const { return now_; }
  /// Calls the role made that have not ended (id -> streaming).
  [[nodiscard]] const std::map<core::CallId, bool>& calls() const { return calls_; }

 private:
  template <class Set>
  static typename Set::value_type nth(const Set& set, std::size_t i) {
    return *std::next(set.begin(), static_cast<std::ptrdiff_t>(i));
  }
  template <class Map>
  static typename Map::key_type nth_key(const Map& map, std::size_t i) {
    return std::next(map.begin(), static_cast<std::ptrdiff_t>(i))->first;
  }

  void absorb(core::Effects fx) {
    for (auto& effect : fx) {
      if (auto* c = std::get_if<core::Call>(&effect)) {
        calls_[c->id] = c->stream;
      } else if (auto* r = std::get_if<core::Reply>(&effect)) {
        if (r->last || !r->response.ok()) open_.erase(r->request);
      } else if (auto* cancel = std::get_if<core::Cancel>(&effect)) {
        calls_.erase(cancel->call);
      } else if (auto* t = std::get_if<core::SetTimer>(&effect)) {
        timers_[t->id] = t->at;
      } else if (auto* off = std::get_if<core::CancelTimer>(&effect)) {
        timers_.erase(off->id);
      } else if (auto* a = std::get_if<core::Ask>(&effect)) {
        asks_[a->op] = std::move(*a);
      }
    }
  }

  core::Role& role_;
  FuzzInput& in_;
  std::vector<std::string> handles_;
  core::TimePoint now_ = core::TimePoint{} + std::chrono::seconds(1000);
  std::set<core::RequestId> open_;
  std::map<core::CallId, bool> calls_;
  std::map<core::TimerId, core::TimePoint> timers_;
  std::map<core::OpId, core::Ask> asks_;
  core::RequestId next_request_ = 1;
  core::OpId next_op_ = 1;
};

// The same steps written for a seed (make_seeds.cpp), in RoleDriver::step's format.

inline void write_request(FuzzOutput& out, std::size_t handle, std::size_t peer, std::string_view body) {
  out.byte(static_cast<std::size_t>(Action::request)).byte(handle).byte(peer).bytes(body);
}
inline void write_request_message(FuzzOutput& out, std::size_t request, bool last, std::string_view body) {
  out.byte(static_cast<std::size_t>(Action::request_message)).byte(request).byte(last ? 1 : 0).bytes(body);
}
inline void write_response(FuzzOutput& out, std::size_t call, std::string_view body) {
  out.byte(static_cast<std::size_t>(Action::response)).byte(call).byte(0).bytes(body);
}
inline void write_stream_message(FuzzOutput& out, std::size_t call, std::string_view body) {
  out.byte(static_cast<std::size_t>(Action::stream_message)).byte(call).bytes(body);
}
inline void write_timer(FuzzOutput& out, std::size_t timer) {
  out.byte(static_cast<std::size_t>(Action::timer)).byte(timer);
}
/// An Ask's answer follows: what the target's AskAnswer reads.
inline FuzzOutput& write_local_reply(FuzzOutput& out, std::size_t ask) {
  return out.byte(static_cast<std::size_t>(Action::local_reply)).byte(ask);
}
/// A local call follows: what the target's LocalCallMaker reads.
inline FuzzOutput& write_local_call(FuzzOutput& out) {
  return out.byte(static_cast<std::size_t>(Action::local_call));
}
inline void write_advance(FuzzOutput& out, std::uint64_t ten_ms) {
  out.byte(static_cast<std::size_t>(Action::advance)).number(ten_ms, 2);
}

}  // namespace apiary::fuzz
