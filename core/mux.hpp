#pragma once
/// Mux: several roles in one host. Each role gets a disjoint id space for its calls and
/// timers (the Mux rewrites them on the way out and back, so no role picks id bases),
/// requests are routed by handle, local operations by role name, and an Ask from one
/// role to another is answered inside the Mux. A Mux is itself a Role, so every host
/// runs a list of roles as it runs one.
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/role.hpp"

namespace apiary::core {

/// Index of a role in its Mux, in the order added.
using RoleId = std::uint32_t;

class Mux final : public Role {
 public:
  /// Bits of a role's own call and timer ids; the bits above carry the role's index + 1.
  static constexpr int k_local_bits = 56;
  /// Most roles one Mux holds.
  static constexpr std::size_t k_max_roles = 254;

  /// Adds `role` under `name` (unique; the name LocalCall::role and Ask::role use).
  /// Fails when the name is taken, another role already serves one of its handles, or the
  /// Mux is full. Add every role before the first input.
  Result<RoleId> add(std::string name, std::unique_ptr<Role> role);

  /// Declares `name` a role of another host of the same process: Asks for it leave the
  /// Mux as Ask effects (op ids in the Mux's space), for the host to route, and their
  /// answers come back as LocalReply inputs. Asks for a name neither added nor reached
  /// are answered inside the Mux with errc::not_found.
  void reach(std::string name) { remote_.insert(std::move(name)); }

  /// The role added as `name`, or nullptr.
  [[nodiscard]] Role* find(const std::string& name) const;
  /// Role `id`'s object (id from add()).
  [[nodiscard]] Role& role(RoleId id) const { return *roles_.at(id).role; }
  /// Roles held.
  [[nodiscard]] std::size_t size() const { return roles_.size(); }

  /// Every role's handles, in the order the roles were added.
  [[nodiscard]] std::vector<std::string> handles() const override;

  /// Routes `input`: Start and PeerDown to every role in order; a Request by its handle
  /// (an unknown handle is answered with errc::not_found); responses, stream messages
  /// and timers by the id space they carry; request messages to the role that took the
  /// request; a LocalCall by its role name; effects come back with ids in the Mux's
  /// spaces. Inputs for ids no role owns are dropped and counted (stray()).
  [[nodiscard]] Effects on(TimePoint now, Input input) override;

  /// Inputs that named an id no role owns (e.g. a reply after the role forgot it).
  [[nodiscard]] std::uint64_t stray() const { return stray_; }
  /// Effects refused because a role used an id beyond k_local_bits (a bug in the role).
  [[nodiscard]] std::uint64_t refused() const { return refused_; }

 private:
  struct Entry {
    std::string name;
    std::unique_ptr<Role> role;
  };
  /// Who started a local operation a role runs: the host (its op id), or a role's Ask.
  struct Origin {
    bool from_host = true;
    RoleId role = 0;
    OpId op = 0;
  };

  /// Feeds `input` to role `r` and appends its effects, translated, to `out`.
  void feed(TimePoint now, RoleId r, Input input, Effects& out);
  /// Translates role `r`'s effects into `out` (asks answered in place).
  void translate(TimePoint now, RoleId r, Effects fx, Effects& out);
  /// `local` in role `r`'s space, or 0 when it does not fit.
  [[nodiscard]] std::uint64_t to_global(RoleId r, std::uint64_t local);
  /// The role owning global id `id`, with its local id; false when none does.
  [[nodiscard]] bool to_local(std::uint64_t id, RoleId& r, std::uint64_t& local) const;

  std::vector<Entry> roles_;
  std::map<std::string, RoleId> by_name_;
  std::unordered_map<std::string, RoleId> by_handle_;
  std::unordered_map<RequestId, RoleId> requests_;  ///< open streaming requests → the role
  std::unordered_map<OpId, Origin> ops_;            ///< local ops running in a role
  std::set<std::string> remote_;                    ///< roles of other hosts (reach())
  std::unordered_map<OpId, Origin> asked_out_;      ///< Asks that left the Mux -> who asked
  OpId next_op_ = 1;
  std::uint64_t stray_ = 0;
  std::uint64_t refused_ = 0;
};

}  // namespace apiary::core
