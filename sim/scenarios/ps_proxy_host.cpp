#include "sim/scenarios/ps_proxy_host.hpp"

namespace apiary::sim::scenarios {

using core::Effects;
using core::TimePoint;

Effects PsProxyHost::on_start(TimePoint /*now*/) { return {}; }

Effects PsProxyHost::on_request(TimePoint now, core::RequestId id, const std::string& handle,
                                const std::string& request) {
  return proxy_.on_request(now, id, handle, request);
}

Effects PsProxyHost::on_response(TimePoint now, core::CallId call, const Result<std::string>& response) {
  return proxy_.on_response(now, call, response);
}

Effects PsProxyHost::on_timer(TimePoint /*now*/, core::TimerId /*id*/) { return {}; }

}  // namespace apiary::sim::scenarios
