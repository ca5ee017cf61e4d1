// The expert server's streamed requests (rpc_forward_stream, rpc_backward_stream): chunks
// joined as they come, the whole request queued as a unary one when the caller's
// direction ends; streams idle for k_stream_idle dropped.
#include <algorithm>
#include <utility>

#include "core/moe/expert_server_role.hpp"

namespace apiary::core::moe {
namespace {

const char* method_of(bool forward) { return forward ? "rpc_forward_stream" : "rpc_backward_stream"; }

}  // namespace

Effects ExpertServerRole::on_stream(TimePoint now, RequestId id, Kind kind, const Buffer& body) {
  stats_.streams += 1;
  const char* method = method_of(kind == Kind::forward);
  InStream stream{kind, RequestJoiner{}, now};
  if (Status added = stream.joiner.add(body); !added) {
    return refuse(id, make_error(added.error().code, "{}: {}", method, added.error().message));
  }
  // An unknown uid is refused at once, before the rest of the stream travels for nothing.
  if (experts_.count(stream.joiner.uid()) == 0) return refuse(id, unknown_expert(stream.joiner.uid()));
  streams_.insert_or_assign(id, std::move(stream));
  Effects fx;
  arm_stream_timer(fx);
  return fx;
}

Effects ExpertServerRole::on_request_message(TimePoint now, RequestId id, const Result<Buffer>& message, bool last) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return {};  // refused already, or not a stream of this role
  Effects fx;
  if (!message) {
    // The caller broke the stream off (cancel, deadline, gone): nobody to answer.
    stats_.broken_streams += 1;
    streams_.erase(it);
    arm_stream_timer(fx);
    return fx;
  }
  InStream& stream = it->second;
  stream.last = now;
  const Kind kind = stream.kind;
  const char* method = method_of(kind == Kind::forward);
  Status added = ok_status();
  if (!(last && message->size() == 0)) added = stream.joiner.add(*message);  // an empty last message only ends
  if (added && !last) return fx;
  auto request = added ? stream.joiner.finish() : Result<pb::ExpertRequest>(added.error());
  streams_.erase(it);
  arm_stream_timer(fx);
  Effects answer;
  if (!request) {
    answer = refuse(id, make_error(request.error().code, "{}: {}{}", method, added ? "the stream ended early: " : "",
                                   request.error().message));
  } else {
    answer = submit(now, id, kind, *request, /*stream=*/true);
  }
  fx.insert(fx.end(), std::make_move_iterator(answer.begin()), std::make_move_iterator(answer.end()));
  return fx;
}

Effects ExpertServerRole::expire_streams(TimePoint now) {
  Effects fx;
  for (auto it = streams_.begin(); it != streams_.end();) {
    if (now - it->second.last < k_stream_idle) {
      ++it;
      continue;
    }
    stats_.broken_streams += 1;
    fx.push_back(Reply{it->first, make_error(errc::deadline_exceeded,
                                             "{}: no message for {} s: expected the stream's next chunk or its end; "
                                             "send the chunks back to back, as a streaming call",
                                             method_of(it->second.kind == Kind::forward),
                                             std::chrono::duration_cast<std::chrono::seconds>(k_stream_idle).count())});
    it = streams_.erase(it);
  }
  arm_stream_timer(fx);
  return fx;
}

void ExpertServerRole::arm_stream_timer(Effects& fx) {
  std::optional<TimePoint> next;
  for (const auto& entry : streams_) next = std::min(next.value_or(entry.second.last), entry.second.last);
  if (!next) {
    if (stream_timer_at_) fx.push_back(CancelTimer{k_stream_timer});
    stream_timer_at_.reset();
    return;
  }
  const TimePoint at = *next + k_stream_idle;
  if (stream_timer_at_ && *stream_timer_at_ <= at) return;  // fires first; it re-arms then
  fx.push_back(SetTimer{k_stream_timer, at});
  stream_timer_at_ = at;
}

}  // namespace apiary::core::moe
