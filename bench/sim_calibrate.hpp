#pragma once
/// `apiary sim calibrate`'s measurements (sim/cost_profile.hpp): the transport between two
/// processes over loopback (the transport bench's session, processor time of both
/// processes per call and per byte), and the training step's work in this process (the
/// PS shard's sum and updates, the logistic-regression gradient and loss, memcpy).
#include <string>

#include "messages/result.hpp"
#include "sim/cost_profile.hpp"

namespace apiary::bench {

/// Measures this machine's profile; `self_exe` runs the transport bench's server side;
/// `quick`: fewer iterations and smaller sizes (a smoke run). Errors: the transport's
/// figures that could not be measured.
[[nodiscard]] Result<sim::CostProfile> calibrate(const std::string& self_exe, bool quick);

}  // namespace apiary::bench
