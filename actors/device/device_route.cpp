#include "actors/device/device_route.hpp"

#include <caf/all.hpp>

#include "actors/role_actor.hpp"

namespace apiary::actors {

caf::actor spawn_device_route(caf::actor_system& sys, device_actor device) {
  return sys.spawn([device](caf::event_based_actor* self) -> caf::behavior {
    return {
        [self, device](role_call_message& m) {
          auto reply = std::move(m.reply);
          auto* job = m.args.as<core::averaging::ReduceJob>();
          if (m.method != core::averaging::k_reduce_method || job == nullptr) {
            reply->deliver(make_error(errc::not_found, "the device has one local method, '{}' of a ReduceJob; got '{}' "
                                                       "of a {}", core::averaging::k_reduce_method, m.method, m.args.type_name()));
            return;
          }
          self->request(device, caf::infinite, reduce_part_request{std::move(*job)})
              .then(
                  [reply](Result<core::averaging::ReducedPart>& r) {
                    if (!r) {
                      reply->deliver(r.error());
                    } else {
                      reply->deliver(core::Value::of(std::move(r.value())));
                    }
                  },
                  [self, reply](caf::error& e) {
                    reply->deliver(make_error(errc::unavailable, "the device actor did not reduce the part ({}); "
                                                                 "this part keeps its local values",
                                              self->system().render(e)));
                  });
        },
    };
  });
}

}  // namespace apiary::actors
