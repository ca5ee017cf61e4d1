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
/// `quick`: fewer iterations and smaller sizes (a smoke run). `features`: the model size
/// the training step's work is measured at (0: 1,048,576, a 4 MB w; 65,536 when quick):
/// per value it costs more once the model is far past the caches, so a profile for a
/// 100 MiB model is measured at that size. `density`: the data's (below 1: sparse data,
/// core/ps/logistic_regression.hpp), at which the sparse figures are measured (a dense
/// model's at 1 in 1,000). Errors: the transport's figures that could not be measured.
[[nodiscard]] Result<sim::CostProfile> calibrate(const std::string& self_exe, bool quick, std::size_t features = 0,
                                                 double density = 1.0);

}  // namespace apiary::bench
