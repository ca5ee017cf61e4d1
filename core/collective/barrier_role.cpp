#include "core/collective/barrier_role.hpp"

#include <utility>

namespace apiary::core::collective {

Effects BarrierRole::on(TimePoint now, Input input) {
  if (auto* r = std::get_if<Request>(&input)) return advance(barrier_.on_request(now, r->id, std::string(r->body.view())));
  if (auto* r = std::get_if<Response>(&input)) {
    if (!barrier_.owns_call(r->call)) return {};
    return advance(barrier_.on_response(now, r->call, r->result));
  }
  if (auto* t = std::get_if<TimerFired>(&input)) {
    if (!barrier_.owns_timer(t->id)) return {};
    return advance(barrier_.on_timer(now, t->id));
  }
  auto* call = std::get_if<LocalCall>(&input);
  if (call == nullptr) return {};
  if (call->method != "meet") return {unknown_method(*call, "the barrier")};
  const auto* meet = call->args.as<BarrierMeet>();
  if (meet == nullptr) {
    return {Complete{call->op, make_error(errc::invalid_argument, "meet: expected BarrierMeet, got {}",
                                          call->args.type_name())}};
  }
  if (running_) return {Complete{call->op, make_error(errc::protocol, "barrier: one round at a time")}};
  running_ = call->op;
  Effects out = barrier_.reach(meet->level);
  auto started = barrier_.start(now, meet->level, now + meet->patience);
  out.insert(out.end(), std::make_move_iterator(started.begin()), std::make_move_iterator(started.end()));
  return advance(std::move(out));
}

Effects BarrierRole::advance(Effects out) {
  if (!running_ || !barrier_.finished()) return out;
  const Status& s = barrier_.status();
  out.push_back(Complete{*std::exchange(running_, std::nullopt), s ? Result<Value>(Value{}) : Result<Value>(s.error())});
  return out;
}

}  // namespace apiary::core::collective
