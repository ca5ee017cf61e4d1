#include "tests/support/test_services.hpp"

#include <atomic>
#include <cstring>
#include <thread>
#include <stdexcept>
#include <unordered_map>

#include "actors/rpc.hpp"
#include "test.pb.h"

namespace apiary::testing {

using actors::Delivery;
using actors::DeliveryKind;
using actors::from_buffer;
using actors::to_buffer;

std::uint64_t fnv1a(const void* data, std::size_t n) {
  auto* p = static_cast<const unsigned char*>(data);
  std::uint64_t h = 1469598103934665603ull;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

void fill_pattern(void* data, std::size_t n, std::uint64_t seed) {
  auto* p = static_cast<unsigned char*>(data);
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(p + i, &x, 8);
  }
  for (; i < n; ++i) p[i] = static_cast<unsigned char>(x >> (8 * (i % 8)));
}

namespace {

pb::TestResponse response(int n) {
  pb::TestResponse r;
  r.set_number(n);
  return r;
}

struct stream_state {
  std::shared_ptr<actors::Gateway> gw;
  std::unordered_map<actors::CallId, long> sums;   // rpc_sum accumulators
  std::unordered_map<actors::CallId, int> forever; // rpc_forever calls still streaming
};

/// Calls this process's test services saw end early (cancel, deadline, peer down).
std::atomic<int> g_cancelled{0};

using tick_atom = caf::atom_constant<caf::atom("tick")>;

/// One actor serves every streaming handle; unary ones go through serve_proto.
caf::behavior streams(caf::stateful_actor<stream_state>* self, std::shared_ptr<actors::Gateway> gw) {
  self->state.gw = std::move(gw);
  return {
      [self](Delivery& d) {
        auto& st = self->state;
        auto& g = *st.gw;
        if (d.kind == DeliveryKind::error) {
          if (d.error.code == errc::cancelled || d.error.code == errc::peer_down ||
              d.error.code == errc::deadline_exceeded) {
            ++g_cancelled;
          }
          st.sums.erase(d.call);
          st.forever.erase(d.call);
          return;
        }
        auto number = [&]() -> int {
          auto r = from_buffer<pb::TestRequest>(d.data, d.handle);
          return r ? r->number() : 0;
        };
        if (d.handle == "test.rpc_sum") {
          if (d.has_message) st.sums[d.call] += number();
          if (d.end_of_stream) {
            g.send(d.call, to_buffer(response(static_cast<int>(st.sums[d.call]))), true);
            st.sums.erase(d.call);
          }
        } else if (d.handle == "test.rpc_count" && d.kind == DeliveryKind::open) {
          const int n = number();
          for (int i = 1; i <= n; ++i) g.send(d.call, to_buffer(response(i)), i == n);
          if (n <= 0) g.end(d.call);
        } else if (d.handle == "test.rpc_echo") {
          if (d.has_message) g.send(d.call, to_buffer(response(number())), false);
          if (d.end_of_stream) g.end(d.call);
        } else if (d.handle == "test.rpc_forever" && d.kind == DeliveryKind::open) {
          st.forever[d.call] = 0;
          self->send(self, tick_atom::value, d.call);
        } else if (d.handle == "test.rpc_cancel_me" && d.kind == DeliveryKind::open) {
          g.send(d.call, to_buffer(response(1)), false);
          g.cancel(d.call, "the server cancelled this call");
        }
      },
      [self](tick_atom, actors::CallId call) {
        auto& st = self->state;
        auto it = st.forever.find(call);
        if (it == st.forever.end()) return;  // cancelled: stop streaming
        st.gw->send(call, to_buffer(response(++it->second)), false);
        self->delayed_send(self, std::chrono::milliseconds(10), tick_atom::value, call);
      },
  };
}

}  // namespace

void install_test_services(caf::actor_system& sys, std::shared_ptr<actors::Gateway> gw) {
  auto s = sys.spawn(streams, gw);
  for (const char* h : {"test.rpc_sum", "test.rpc_count", "test.rpc_echo", "test.rpc_forever", "test.rpc_cancel_me"}) {
    gw->serve(h, s);
  }
  actors::serve_proto<pb::TestRequest, pb::TestResponse>(
      sys, gw, "test.rpc_square",
      [](const std::string&, const pb::TestRequest& r) -> Result<pb::TestResponse> {
        return response(r.number() * r.number());
      });
  actors::serve_proto<pb::TestRequest, pb::TestResponse>(
      sys, gw, "test.rpc_throw",
      [](const std::string&, const pb::TestRequest&) -> Result<pb::TestResponse> {
        throw std::runtime_error("boom");
      });
  actors::serve_proto<pb::TestRequest, pb::TestResponse>(
      sys, gw, "test.rpc_fail", [](const std::string&, const pb::TestRequest& r) -> Result<pb::TestResponse> {
        if (r.number() % 2 != 0) return make_error(errc::invalid_argument, "odd number {}", r.number());
        return response(r.number());
      });
  actors::serve_proto<pb::TestRequest, pb::TestResponse>(
      sys, gw, "test.rpc_cancelled", [](const std::string&, const pb::TestRequest&) -> Result<pb::TestResponse> {
        return response(g_cancelled.load());
      });
  actors::serve_proto<pb::TestRequest, pb::TestResponse>(
      sys, gw, "test.rpc_sleep", [](const std::string&, const pb::TestRequest& r) -> Result<pb::TestResponse> {
        std::this_thread::sleep_for(std::chrono::milliseconds(r.number()));
        return response(r.number());
      });
  actors::serve_unary(sys, gw, "test.rpc_hash", [](const Delivery& d) -> Result<Buffer> {
    Buffer out = Buffer::allocate(16);
    const std::uint64_t h = fnv1a(d.data.data(), d.data.size());
    const std::uint64_t n = d.data.size();
    std::memcpy(out.data(), &h, 8);
    std::memcpy(out.data() + 8, &n, 8);
    return out;
  });
  actors::serve_unary(sys, gw, "test.rpc_make", [](const Delivery& d) -> Result<Buffer> {
    if (d.data.size() != 16) return make_error(errc::invalid_argument, "rpc_make wants 16 bytes, got {}", d.data.size());
    std::uint64_t n = 0, seed = 0;
    std::memcpy(&n, d.data.data(), 8);
    std::memcpy(&seed, d.data.data() + 8, 8);
    if (n > (std::uint64_t{1} << 30)) return make_error(errc::too_large, "rpc_make size {} over 1 GiB", n);
    Buffer out = Buffer::allocate(n);
    fill_pattern(out.data(), n, seed);
    return out;
  });
  // rpc_make's bytes as the body of a spliced answer: head "head:<seed>", tail "tail".
  auto spliced = sys.spawn([gw](caf::event_based_actor*) -> caf::behavior {
    return {[gw](Delivery& d) {
      if (d.kind != DeliveryKind::open) return;
      if (d.data.size() != 16) {
        gw->fail(d.call, make_error(errc::invalid_argument, "rpc_make_spliced wants 16 bytes, got {}", d.data.size()));
        return;
      }
      std::uint64_t n = 0, seed = 0;
      std::memcpy(&n, d.data.data(), 8);
      std::memcpy(&seed, d.data.data() + 8, 8);
      if (n > (std::uint64_t{1} << 30)) {
        gw->fail(d.call, make_error(errc::too_large, "rpc_make_spliced size {} over 1 GiB", n));
        return;
      }
      Buffer body = Buffer::allocate(n);
      fill_pattern(body.data(), n, seed);
      gw->send(d.call, Payload{spliced_head(seed), std::move(body), "tail"}, true);
    }};
  });
  gw->serve("test.rpc_make_spliced", spliced);
}

std::string spliced_head(std::uint64_t seed) { return "head:" + std::to_string(seed); }

}  // namespace apiary::testing
