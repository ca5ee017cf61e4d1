#pragma once
/// The simulation's one source of randomness is core's (core/rng.hpp): one seeded
/// xoshiro256** per World, so a seed replays exactly.
#include "core/rng.hpp"

namespace apiary::sim {

using Rng = core::Rng;

}  // namespace apiary::sim
