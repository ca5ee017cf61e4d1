#pragma once
/// The services the RPC and transport tests call, installed on a gateway either in a
/// separate server process (tests/support/rpc_test_server.cpp) or in-process.
#include <memory>
#include <string>

#include <caf/actor_system.hpp>

#include "actors/gateway.hpp"

namespace apiary::testing {

/// Handles served (all under "test."):
///   rpc_square     unary TestRequest{n} → TestResponse{n*n}
///   rpc_sum        client stream of TestRequest → TestResponse{sum}
///   rpc_count      server stream: TestRequest{n} → TestResponse{1..n}
///   rpc_echo       bidi: each TestRequest{n} → TestResponse{n}; ends when the caller ends
///   rpc_forever    server stream: TestResponse every 10 ms until cancelled
///   rpc_cancel_me  server stream: one TestResponse, then the server cancels
///   rpc_throw      unary handler that throws std::runtime_error("boom")
///   rpc_fail       unary handler returning errc::invalid_argument "odd number"
///   rpc_cancelled  unary: TestResponse{number of calls this server saw cancelled}
///   rpc_hash       unary raw bytes → 16 bytes: FNV-1a 64 of the payload ‖ its size (LE)
///   rpc_make       unary 16 bytes (size ‖ seed, LE) → `size` pseudo-random bytes from `seed`
///   rpc_sleep      unary TestRequest{ms}: answers after ms milliseconds
///   rpc_make_spliced  rpc_make's bytes as the body of a spliced answer (Payload): head
///                  spliced_head(seed), tail "tail"
void install_test_services(caf::actor_system& sys, std::shared_ptr<actors::Gateway> gw);

/// The head of rpc_make_spliced's answer for `seed`.
std::string spliced_head(std::uint64_t seed);

/// FNV-1a 64 of `n` bytes.
std::uint64_t fnv1a(const void* data, std::size_t n);

/// Fills `n` bytes with the deterministic pattern rpc_make uses for `seed`.
void fill_pattern(void* data, std::size_t n, std::uint64_t seed);

}  // namespace apiary::testing
