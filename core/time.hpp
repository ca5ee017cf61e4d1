#pragma once
/// Time as core/ sees it: passed in by the caller, never read from a clock here.
#include <chrono>
#include <cstdint>

namespace apiary::core {

/// A span of time, nanosecond resolution.
using Duration = std::chrono::nanoseconds;

/// A point in time: the duration since the driving clock's epoch (the system clock in
/// production, zero at the start of a simulation).
using TimePoint = std::chrono::nanoseconds;

/// Seconds as a double, the unit of DHT expirations.
inline double to_seconds(TimePoint t) { return std::chrono::duration<double>(t).count(); }

/// A TimePoint from seconds.
inline TimePoint from_seconds(double s) {
  return std::chrono::duration_cast<TimePoint>(std::chrono::duration<double>(s));
}

}  // namespace apiary::core
