#pragma once
/// The messages of the test services (test_services.hpp) as the tests send and read them.
#include <catch2/catch.hpp>

#include "actors/rpc.hpp"
#include "test.pb.h"

namespace apiary::testing {

/// TestRequest{n}, serialized: the argument of most test services.
inline Buffer test_request(int n) {
  pb::TestRequest r;
  r.set_number(n);
  return actors::to_buffer(r);
}

/// The number of the serialized TestResponse `b`; fails the test when `b` is not one.
inline int response_number(const Buffer& b) {
  auto r = actors::from_buffer<pb::TestResponse>(b, "response");
  REQUIRE(r.ok());
  return r->number();
}

}  // namespace apiary::testing
