// The collaborative optimizer's per-step decisions (core/optim/epoch.hpp), as hivemind's
// Optimizer makes them.
#include <catch2/catch.hpp>

#include "core/optim/epoch.hpp"

using namespace apiary::core::optim;

TEST_CASE("a peer loads the state when it is off the swarm's epoch after a fresh read, or two behind", "[optim]") {
  // Once per epoch, after a fresh read: any other epoch.
  CHECK(should_load_state(4, 5, true, true));
  CHECK(should_load_state(6, 5, true, true));
  CHECK_FALSE(should_load_state(5, 5, true, true));
  // Otherwise only more than one behind: one behind takes part in the next step.
  CHECK_FALSE(should_load_state(4, 5, true, false));
  CHECK_FALSE(should_load_state(4, 5, false, true));
  CHECK(should_load_state(3, 5, false, false));
  CHECK_FALSE(should_load_state(7, 5, false, false));
}

TEST_CASE("the next epoch is the next one, or the swarm's when it is ahead", "[optim]") {
  CHECK(next_epoch(3, 3) == 4);
  CHECK(next_epoch(3, 0) == 4);
  CHECK(next_epoch(3, 7) == 7);
}

TEST_CASE("the state is averaged every N epochs with someone to average with", "[optim]") {
  CHECK(should_average_state(4, 2, 3));
  CHECK_FALSE(should_average_state(5, 2, 3));
  CHECK_FALSE(should_average_state(4, 2, 1));
  CHECK(should_average_state(5, 1, 2));
  CHECK_FALSE(should_average_state(5, 0, 2));
}

TEST_CASE("matchmaking begins within matchmaking_time of the epoch's end, once", "[optim]") {
  CHECK(should_schedule(0.5, 1.0, 2, false));
  CHECK(should_schedule(-3.0, 1.0, 2, false));
  CHECK_FALSE(should_schedule(2.0, 1.0, 2, false));
  CHECK_FALSE(should_schedule(0.5, 1.0, 1, false));
  CHECK_FALSE(should_schedule(0.5, 1.0, 2, true));
}
