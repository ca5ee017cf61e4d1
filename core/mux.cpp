#include "core/mux.hpp"

#include <type_traits>

namespace apiary::core {
namespace {
constexpr std::uint64_t k_local_mask = (std::uint64_t{1} << Mux::k_local_bits) - 1;
}  // namespace

Result<RoleId> Mux::add(std::string name, std::unique_ptr<Role> role) {
  if (role == nullptr) return make_error(errc::invalid_argument, "Mux::add: role '{}' is null", name);
  if (roles_.size() >= k_max_roles) {
    return make_error(errc::invalid_argument, "Mux::add: a Mux holds at most {} roles", k_max_roles);
  }
  if (by_name_.count(name) != 0) return make_error(errc::invalid_argument, "Mux::add: a role named '{}' is already added", name);
  const auto id = static_cast<RoleId>(roles_.size());
  const auto served = role->handles();
  for (const auto& h : served) {
    if (auto it = by_handle_.find(h); it != by_handle_.end()) {
      return make_error(errc::invalid_argument, "Mux::add: role '{}' serves '{}', which role '{}' already serves", name, h,
                        roles_[it->second].name);
    }
  }
  for (const auto& h : served) by_handle_.emplace(h, id);
  by_name_.emplace(name, id);
  roles_.push_back(Entry{std::move(name), std::move(role)});
  return id;
}

Role* Mux::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : roles_[it->second].role.get();
}

std::vector<std::string> Mux::handles() const {
  std::vector<std::string> out;
  for (const auto& e : roles_) {
    auto h = e.role->handles();
    out.insert(out.end(), h.begin(), h.end());
  }
  return out;
}

std::uint64_t Mux::to_global(RoleId r, std::uint64_t local) {
  if (local > k_local_mask) {
    ++refused_;
    return 0;
  }
  return (std::uint64_t{r} + 1) << k_local_bits | local;
}

bool Mux::to_local(std::uint64_t id, RoleId& r, std::uint64_t& local) const {
  const std::uint64_t slot = id >> k_local_bits;
  if (slot == 0 || slot > roles_.size()) return false;
  r = static_cast<RoleId>(slot - 1);
  local = id & k_local_mask;
  return true;
}

Effects Mux::on(TimePoint now, Input input) {
  Effects out;
  std::visit(
      [&](auto& in) {
        using T = std::decay_t<decltype(in)>;
        RoleId r = 0;
        std::uint64_t local = 0;
        if constexpr (std::is_same_v<T, Start> || std::is_same_v<T, PeerDown>) {
          for (RoleId i = 0; i < roles_.size(); ++i) feed(now, i, in, out);
        } else if constexpr (std::is_same_v<T, Request>) {
          auto it = by_handle_.find(in.handle);
          if (it == by_handle_.end()) {
            out.push_back(Reply{in.id, make_error(errc::not_found, "no role here serves '{}'", in.handle)});
            return;
          }
          requests_[in.id] = it->second;
          feed(now, it->second, std::move(in), out);
        } else if constexpr (std::is_same_v<T, RequestMessage>) {
          auto it = requests_.find(in.id);
          if (it == requests_.end()) {
            ++stray_;
            return;
          }
          r = it->second;
          if (!in.message.ok()) requests_.erase(it);  // an error ends the request
          feed(now, r, std::move(in), out);
        } else if constexpr (std::is_same_v<T, Response> || std::is_same_v<T, StreamMessage>) {
          if (!to_local(in.call, r, local)) {
            ++stray_;
            return;
          }
          in.call = local;
          feed(now, r, std::move(in), out);
        } else if constexpr (std::is_same_v<T, TimerFired>) {
          if (!to_local(in.id, r, local)) {
            ++stray_;
            return;
          }
          in.id = local;
          feed(now, r, in, out);
        } else if constexpr (std::is_same_v<T, LocalCall>) {
          auto it = by_name_.find(in.role);
          if (it == by_name_.end() && roles_.size() == 1 && in.role.empty()) it = by_name_.begin();
          if (it == by_name_.end()) {
            out.push_back(Complete{in.op, make_error(errc::not_found, "no role named '{}' here", in.role)});
            return;
          }
          const OpId op = next_op_++;
          ops_.emplace(op, Origin{true, 0, in.op});
          in.op = op;
          feed(now, it->second, std::move(in), out);
        } else if constexpr (std::is_same_v<T, LocalReply>) {
          auto it = asked_out_.find(in.op);
          if (it == asked_out_.end()) {
            ++stray_;  // the answer to an Ask that never left the Mux, or one answered already
            return;
          }
          const Origin origin = it->second;
          asked_out_.erase(it);
          feed(now, origin.role, LocalReply{origin.op, std::move(in.result)}, out);
        }
      },
      input);
  return out;
}

void Mux::feed(TimePoint now, RoleId r, Input input, Effects& out) {
  translate(now, r, roles_[r].role->on(now, std::move(input)), out);
}

void Mux::translate(TimePoint now, RoleId r, Effects fx, Effects& out) {
  for (Effect& effect : fx) {
    if (auto* call = std::get_if<Call>(&effect)) {
      const CallId local = call->id;
      call->id = to_global(r, local);
      if (call->id == 0) {
        feed(now, r, Response{local, make_error(errc::internal, "call id {} is beyond the role's id space", local)}, out);
        continue;
      }
    } else if (auto* send = std::get_if<Send>(&effect)) {
      send->call = to_global(r, send->call);
    } else if (auto* cancel = std::get_if<Cancel>(&effect)) {
      cancel->call = to_global(r, cancel->call);
    } else if (auto* set = std::get_if<SetTimer>(&effect)) {
      set->id = to_global(r, set->id);
    } else if (auto* unset = std::get_if<CancelTimer>(&effect)) {
      unset->id = to_global(r, unset->id);
    } else if (auto* reply = std::get_if<Reply>(&effect)) {
      if (reply->last || !reply->response.ok()) requests_.erase(reply->request);
    } else if (auto* done = std::get_if<Complete>(&effect)) {
      auto it = ops_.find(done->op);
      if (it == ops_.end()) {
        ++stray_;  // completes an op nobody started: dropped, counted
        continue;
      }
      const Origin origin = it->second;
      ops_.erase(it);
      if (origin.from_host) {
        done->op = origin.op;
      } else {
        feed(now, origin.role, LocalReply{origin.op, std::move(done->result)}, out);
        continue;
      }
    } else if (auto* ask = std::get_if<Ask>(&effect)) {
      auto it = by_name_.find(ask->role);
      if (it == by_name_.end() && remote_.count(ask->role) != 0) {
        const OpId op = next_op_++;
        asked_out_.emplace(op, Origin{false, r, ask->op});
        ask->op = op;
        out.push_back(std::move(effect));
        continue;
      }
      if (it == by_name_.end()) {
        feed(now, r, no_such_role(*ask), out);
        continue;
      }
      const OpId op = next_op_++;
      ops_.emplace(op, Origin{false, r, ask->op});
      feed(now, it->second, LocalCall{op, ask->role, std::move(ask->method), std::move(ask->args)}, out);
      continue;
    }
    out.push_back(std::move(effect));
  }
}

}  // namespace apiary::core
