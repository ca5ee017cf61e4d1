#include "actors/role_runner.hpp"

#include "actors/role_actor.hpp"

namespace apiary::actors {

const core::PeerAddr& RoleRunner::caller_of(const Delivery& d) {
  auto it = from_.find(d.peer_listen_addr);
  if (it == from_.end()) {
    it = from_.emplace(d.peer_listen_addr, Caller{d.peer_id, peer_addr_of(d.peer_listen_addr, d.peer_id)}).first;
  } else if (it->second.peer_id != d.peer_id) {
    it->second = Caller{d.peer_id, peer_addr_of(d.peer_listen_addr, d.peer_id)};
  }
  return it->second.addr;
}

void RoleRunner::feed(core::Input input) {
  // Calls, messages and timers go through the call table (calls that cannot be issued
  // come straight back as responses), each Complete to its caller, an Ask no host here
  // serves is answered with an error.
  core::Effects fx = role_->on(now(), std::move(input));
  auto local = core::take_local(fx);
  for (auto& failed : calls().execute(std::move(fx))) feed(core::Response{failed.call, std::move(failed.result)});
  for (auto& done : local.completed) {
    auto it = waiting_.find(done.op);
    if (it == waiting_.end()) continue;  // an operation the role started itself
    auto reply = std::move(it->second);
    waiting_.erase(it);
    reply->deliver(std::move(done.result));
  }
  for (auto& ask : local.asks) {
    auto route = routes_.find(ask.role);
    if (route == routes_.end()) {
      feed(core::no_such_role(ask));
      continue;
    }
    call_role(route->second, ask.role, std::move(ask.method), std::move(ask.args), reply_path(ask.op));
  }
}

void RoleRunner::on_delivery(Delivery& d) {
  CallTable& t = calls();
  if (auto req = t.request_view_of(d)) {
    feed(core::Request{req->id, std::move(req->handle), caller_of(d), std::move(req->body)});
  }
  if (auto m = t.request_message_view_of(d)) feed(core::RequestMessage{m->request, std::move(m->message), m->last});
  if (auto m = t.message_view_of(d)) feed(core::StreamMessage{m->call, std::move(m->message), m->landed});
  if (auto r = t.response_of(d)) feed(core::Response{r->call, std::move(r->result), std::move(r->body), r->landed});
}

void RoleRunner::on_local_call(std::string role, std::string method, core::Value args,
                               std::shared_ptr<RoleReply> reply) {
  const core::OpId op = next_op_++;
  waiting_.emplace(op, std::move(reply));
  feed(core::LocalCall{op, std::move(role), std::move(method), std::move(args)});
}

}  // namespace apiary::actors
