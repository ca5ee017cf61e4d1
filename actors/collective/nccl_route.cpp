#include "actors/collective/nccl_route.hpp"

#include <caf/all.hpp>

#include "actors/role_actor.hpp"
#include "actors/type_ids.hpp"
#include "core/train/allreduce_role.hpp"

namespace apiary::actors {

caf::actor spawn_nccl_route(caf::actor_system& sys, std::shared_ptr<NcclGroup> group) {
  return sys.spawn<caf::detached>([group](caf::event_based_actor*) -> caf::behavior {
    return {
        [group](role_call_message& m) {
          auto* args = m.args.as<core::train::NcclMeanArgs>();
          if (m.method != "mean" || args == nullptr) {
            m.reply->deliver(make_error(errc::not_found, "the NCCL group answers 'mean' with NcclMeanArgs, got '{}' "
                                                         "with {}",
                                        m.method, m.args.type_name()));
            return;
          }
          auto averaged = group->mean(std::move(args->tensors), args->weight, args->codecs);
          if (!averaged) {
            m.reply->deliver(averaged.error());
          } else {
            m.reply->deliver(core::Value::of(std::move(*averaged)));
          }
        },
    };
  });
}

}  // namespace apiary::actors
