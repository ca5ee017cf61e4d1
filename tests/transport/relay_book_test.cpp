// A relay's bookkeeping without a network: reservations, circuits and their limits.
#include <catch2/catch.hpp>

#include "transport/relay_book.hpp"

using namespace apiary;
using transport::CircuitEnd;
using transport::RelayBook;
using transport::RelayLimits;
using namespace std::chrono_literals;

namespace {
const RelayBook::Clock::time_point t0{};
}  // namespace

TEST_CASE("a circuit opens only to a reserved peer and passes frames both ways", "[relay]") {
  RelayBook book;
  auto none = book.open("inbound:1", 5, "B", 100, t0);
  REQUIRE_FALSE(none.ok());
  CHECK(none.error().code == errc::not_found);
  CHECK_THAT(none.error().message, Catch::Contains("no reservation"));

  REQUIRE(book.reserve("B", "inbound:2", t0).ok());
  auto to = book.open("inbound:1", 5, "B", 100, t0 + 1s);
  REQUIRE(to.ok());
  CHECK(*to == CircuitEnd{"inbound:2", 100, false});
  CHECK(book.circuits() == 1);
  auto again = book.open("inbound:1", 5, "B", 101, t0 + 1s);
  REQUIRE_FALSE(again.ok());
  CHECK(again.error().code == errc::protocol);

  auto there = book.forward(CircuitEnd{"inbound:1", 5, true}, 10);
  REQUIRE(there.to);
  CHECK(*there.to == CircuitEnd{"inbound:2", 100, false});
  auto back = book.forward(*to, 10);
  REQUIRE(back.to);
  CHECK(*back.to == CircuitEnd{"inbound:1", 5, true});
  // The same id opened by the other side of the connection is another circuit.
  auto unknown = book.forward(CircuitEnd{"inbound:1", 5, false}, 10);
  CHECK_FALSE(unknown.to);
  REQUIRE(unknown.closing.size() == 1);
  CHECK(unknown.closing[0].why.code == errc::not_found);

  auto other = book.close(CircuitEnd{"inbound:1", 5, true});
  REQUIRE(other);
  CHECK(*other == *to);
  CHECK(book.circuits() == 0);
  CHECK_FALSE(book.close(*to));
}

TEST_CASE("byte limits close a circuit at both ends and count per reservation", "[relay]") {
  RelayLimits limits;
  limits.circuit_bytes = 100;
  limits.reservation_bytes = 150;
  RelayBook book(limits);
  REQUIRE(book.reserve("B", "b", t0).ok());
  auto to = book.open("a", 1, "B", 10, t0);
  REQUIRE(to.ok());
  CHECK(book.forward(CircuitEnd{"a", 1, true}, 60).to);
  auto over = book.forward(*to, 41);
  CHECK_FALSE(over.to);
  REQUIRE(over.closing.size() == 2);
  CHECK(over.closing[0].why.code == errc::too_large);
  CHECK_THAT(over.closing[0].why.message, Catch::Contains("limit of 100 bytes"));
  CHECK(book.circuits() == 0);

  // 101 bytes went to B in this reservation; a second circuit reaches its 150.
  auto second = book.open("a", 2, "B", 11, t0);
  REQUIRE(second.ok());
  CHECK(book.forward(*second, 40).to);
  auto spent = book.forward(*second, 10);
  REQUIRE(spent.closing.size() == 2);
  CHECK_THAT(spent.closing[0].why.message, Catch::Contains("in one reservation"));
  // A renewal starts the count afresh.
  REQUIRE(book.reserve("B", "b", t0 + 1s).ok());
  auto third = book.open("a", 3, "B", 12, t0 + 1s);
  REQUIRE(third.ok());
  CHECK(book.forward(*third, 90).to);
}

TEST_CASE("reservations and circuits expire and a lost connection closes what ran over it", "[relay]") {
  RelayLimits limits;
  limits.reservation = 10s;
  limits.circuit = 5s;
  limits.max_reservations = 2;
  limits.max_circuits_per_peer = 1;
  RelayBook book(limits);
  REQUIRE(book.reserve("B", "b", t0).ok());
  REQUIRE(book.reserve("C", "c", t0).ok());
  auto full = book.reserve("D", "d", t0);
  REQUIRE_FALSE(full.ok());
  CHECK(full.error().code == errc::unavailable);
  REQUIRE(book.reserve("B", "b2", t0 + 1s).ok());  // a renewal from a new connection moves the slot

  auto to = book.open("a", 1, "B", 20, t0 + 1s);
  REQUIRE(to.ok());
  CHECK(to->conn == "b2");
  auto busy = book.open("a", 2, "B", 21, t0 + 1s);
  REQUIRE_FALSE(busy.ok());
  CHECK(busy.error().code == errc::unavailable);

  CHECK(book.expire(t0 + 5s).empty());
  auto ended = book.expire(t0 + 6s);
  REQUIRE(ended.size() == 2);
  CHECK(ended[0].why.code == errc::deadline_exceeded);
  CHECK(book.circuits() == 0);
  CHECK(book.reserved("C"));
  book.expire(t0 + 10s);
  CHECK_FALSE(book.reserved("C"));  // C never renewed
  CHECK(book.reserved("B"));
  auto late = book.open("a", 3, "C", 22, t0 + 10s);
  REQUIRE_FALSE(late.ok());

  auto reopened = book.open("a", 4, "B", 23, t0 + 10s);
  REQUIRE(reopened.ok());
  auto closings = book.drop_connection("a");
  REQUIRE(closings.size() == 1);
  CHECK(closings[0].end == *reopened);
  CHECK(closings[0].why.code == errc::peer_down);
  CHECK(book.drop_connection("b2").empty());
  CHECK_FALSE(book.reserved("B"));
}

TEST_CASE("a circuit id in use at the reserved peer's end is refused, and circuits that outlive a reservation count "
          "against the next", "[relay]") {
  RelayLimits limits;
  limits.reservation = 1000ms;
  limits.max_circuits_per_peer = 2;
  RelayBook book(limits);
  REQUIRE(book.reserve("B", "inbound:2", t0).ok());
  REQUIRE(book.open("inbound:1", 5, "B", 100, t0).ok());
  // The relay's own id for the reserved peer's end must be unused there: the circuit
  // already open keeps its ends.
  auto taken = book.open("inbound:3", 6, "B", 100, t0);
  REQUIRE_FALSE(taken.ok());
  CHECK(taken.error().code == errc::protocol);
  CHECK_THAT(taken.error().message, Catch::Contains("circuit 100 is already open on the connection of PeerID"));
  auto first = book.forward(CircuitEnd{"inbound:1", 5, true}, 1);
  REQUIRE(first.to);
  CHECK(*first.to == CircuitEnd{"inbound:2", 100, false});
  // The reservation ends; its circuit goes on, and counts against the peer's next one.
  CHECK(book.expire(t0 + 1500ms).empty());
  CHECK_FALSE(book.reserved("B"));
  CHECK(book.circuits() == 1);
  REQUIRE(book.reserve("B", "inbound:2", t0 + 1600ms).ok());
  REQUIRE(book.open("inbound:1", 7, "B", 101, t0 + 1600ms).ok());
  auto over = book.open("inbound:1", 8, "B", 102, t0 + 1600ms);
  REQUIRE_FALSE(over.ok());
  CHECK(over.error().code == errc::unavailable);
  // Closing the old one frees its place.
  CHECK(book.close(CircuitEnd{"inbound:1", 5, true}).has_value());
  CHECK(book.open("inbound:1", 8, "B", 102, t0 + 1600ms).ok());
}
