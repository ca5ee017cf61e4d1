#include "messages/result.hpp"

namespace apiary {

const char* to_string(errc code) {
  switch (code) {
    case errc::ok: return "ok";
    case errc::invalid_argument: return "invalid_argument";
    case errc::malformed: return "malformed";
    case errc::too_large: return "too_large";
    case errc::not_found: return "not_found";
    case errc::unavailable: return "unavailable";
    case errc::peer_down: return "peer_down";
    case errc::deadline_exceeded: return "deadline_exceeded";
    case errc::cancelled: return "cancelled";
    case errc::handler_error: return "handler_error";
    case errc::protocol: return "protocol";
    case errc::io: return "io";
    case errc::internal: return "internal";
    case errc::crypto: return "crypto";
    case errc::truncated: return "truncated";
    case errc::unsupported: return "unsupported";
    case errc::unauthorized: return "unauthorized";
  }
  return "unknown";
}

}  // namespace apiary
