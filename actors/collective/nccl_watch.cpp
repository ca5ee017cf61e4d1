#include "actors/collective/nccl_watch.hpp"

#include <charconv>
#include <vector>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "actors/type_ids.hpp"

namespace apiary::actors {

namespace {

/// A session lasts as long as the group: its deadline is far beyond any job (one year).
constexpr auto k_watch_deadline = std::chrono::hours(24 * 365);

/// Rank 0's actor: holds the members' streams; when one fails, fails all the others.
caf::behavior root_watch(caf::event_based_actor*, std::shared_ptr<Gateway> gw, std::shared_ptr<NcclWatchState> st) {
  return {
      [gw, st](Delivery& d) {
        if (d.kind == DeliveryKind::open) {
          const auto text = d.data.view();
          std::size_t rank = 0;
          const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), rank);
          if (!d.has_message || ec != std::errc() || end != text.data() + text.size() || rank == 0 ||
              rank >= st->ranks) {
            gw->fail(d.call, make_error(errc::invalid_argument,
                                        "NCCL watch of group '{}': expected the member's rank (1..{}) as the first "
                                        "message, got '{}'",
                                        st->group, st->ranks - 1, std::string(text.substr(0, 32))));
            return;
          }
          std::lock_guard<std::mutex> lock(st->mu);
          st->members[d.call] = NcclWatchState::Member{rank, d.peer_listen_addr.empty() ? d.peer : d.peer_listen_addr};
          return;
        }
        if (d.kind == DeliveryKind::error) {
          // A member went down: the first reason is kept, and every other member told it.
          std::vector<CallId> others;
          std::string why;
          {
            std::lock_guard<std::mutex> lock(st->mu);
            auto it = st->members.find(d.call);
            if (it == st->members.end()) return;  // failed by us, or never admitted
            if (st->broken.empty()) {
              st->broken = fmt::format("NCCL group '{}': replica {} at {} went down ({})", st->group,
                                       it->second.rank, it->second.peer, d.error.message);
            }
            why = st->broken;
            st->members.erase(it);
            for (const auto& [call, member] : st->members) others.push_back(call);
            st->members.clear();
          }
          for (const CallId call : others) gw->fail(call, make_error(errc::unavailable, "{}", why));
          return;
        }
        if (d.end_of_stream || d.final) {
          // The member left normally: its side is closed, close ours.
          bool held = false;
          {
            std::lock_guard<std::mutex> lock(st->mu);
            held = st->members.erase(d.call) > 0;
          }
          if (held && !d.final) gw->end(d.call);
        }
      },
  };
}

/// A member's actor: learns from its stream's failure that the group is broken.
caf::behavior member_watch(caf::event_based_actor*, std::shared_ptr<NcclWatchState> st) {
  return {
      [st](Delivery& d) {
        if (d.kind != DeliveryKind::error) return;
        if (d.error.code == errc::unavailable) {
          st->break_with(d.error.message);  // rank 0 passing on why it gave up
        } else if (d.error.code == errc::peer_down) {
          st->break_with(fmt::format("NCCL group '{}': replica 0 at {} went down ({})", st->group, st->root,
                                     d.error.message));
        } else {
          st->break_with(fmt::format("NCCL group '{}': the watch stream to replica 0 at {} failed ({})", st->group,
                                     st->root, d.error.what()));
        }
      },
  };
}

}  // namespace

std::string nccl_watch_handle(const std::string& group) { return "nccl.watch/" + group; }

Result<std::unique_ptr<NcclWatch>> NcclWatch::start(caf::actor_system& sys, std::shared_ptr<Gateway> gw,
                                                    const std::string& group, std::size_t rank, std::size_t ranks,
                                                    const PeerKey& root) {
  if (group.empty() || rank >= ranks || (rank != 0 && root.empty()) || gw == nullptr) {
    return make_error(errc::invalid_argument,
                      "NCCL watch: expected a group name, 0 <= rank < ranks and rank 0's address, got group '{}', "
                      "rank {} of {}, root '{}'",
                      group, rank, ranks, root);
  }
  auto st = std::make_shared<NcclWatchState>();
  st->group = group;
  st->ranks = ranks;
  st->root = root;
  caf::actor actor;
  if (rank == 0) {
    actor = sys.spawn(root_watch, gw, st);
    gw->serve(nccl_watch_handle(group), actor);
  } else {
    actor = sys.spawn(member_watch, st);
    const std::string first = std::to_string(rank);
    st->call = gw->open(actor, root, nccl_watch_handle(group), pb::BIDI_STREAM, k_watch_deadline,
                        Buffer::copy_of(first.data(), first.size()), false);
  }
  return std::unique_ptr<NcclWatch>(new NcclWatch(std::move(gw), std::move(st), std::move(actor)));
}

std::string NcclWatch::broken() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->broken;
}

std::size_t NcclWatch::members_watched() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->members.size();
}

NcclWatch::~NcclWatch() {
  if (state_->call != 0) {
    gw_->end(state_->call);
  } else {
    gw_->unserve(nccl_watch_handle(state_->group));
    std::map<CallId, NcclWatchState::Member> held;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      held.swap(state_->members);
    }
    for (const auto& [call, member] : held) gw_->end(call);
  }
  caf::anon_send_exit(actor_, caf::exit_reason::user_shutdown);
}

}  // namespace apiary::actors
