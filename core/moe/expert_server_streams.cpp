// The expert server's streamed requests (rpc_forward_stream, rpc_backward_stream): chunks
// joined as they come, the whole request queued as a unary one when the caller's
// direction ends.
#include <utility>

#include "core/moe/expert_server_role.hpp"

namespace apiary::core::moe {
namespace {

const char* method_of(bool forward) { return forward ? "rpc_forward_stream" : "rpc_backward_stream"; }

}  // namespace

Effects ExpertServerRole::on_stream(RequestId id, Kind kind, const Buffer& body) {
  stats_.streams += 1;
  const char* method = method_of(kind == Kind::forward);
  InStream stream{kind, RequestJoiner{}};
  if (Status added = stream.joiner.add(body); !added) {
    return refuse(id, make_error(added.error().code, "{}: {}", method, added.error().message));
  }
  // An unknown uid is refused at once, before the rest of the stream travels for nothing.
  if (experts_.count(stream.joiner.uid()) == 0) return refuse(id, unknown_expert(stream.joiner.uid()));
  streams_.insert_or_assign(id, std::move(stream));
  return {};
}

Effects ExpertServerRole::on_request_message(TimePoint now, RequestId id, const Result<Buffer>& message, bool last) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return {};  // refused already, or not a stream of this role
  if (!message) {
    // The caller broke the stream off (cancel, deadline, gone): nobody to answer.
    stats_.broken_streams += 1;
    streams_.erase(it);
    return {};
  }
  const Kind kind = it->second.kind;
  const char* method = method_of(kind == Kind::forward);
  // An empty last message only ends the caller's direction.
  if (!(last && message->size() == 0)) {
    if (Status added = it->second.joiner.add(*message); !added) {
      streams_.erase(it);
      return refuse(id, make_error(added.error().code, "{}: {}", method, added.error().message));
    }
  }
  if (!last) return {};
  auto request = it->second.joiner.finish();
  streams_.erase(it);
  if (!request) {
    return refuse(id, make_error(request.error().code, "{}: the stream ended early: {}", method,
                                 request.error().message));
  }
  return submit(now, id, kind, *request, /*stream=*/true);
}

}  // namespace apiary::core::moe
