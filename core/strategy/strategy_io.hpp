#pragma once
/// Reading and writing Strategy messages (binary protobuf as AutoDist writes them, or
/// text format for people), and the id and path AutoDist gives them.
#include <cstdint>
#include <string>
#include <string_view>

#include "messages/result.hpp"
#include "strategy.pb.h"

namespace apiary::core::strategy {

/// Encoding of a serialized strategy.
enum class StrategyFormat {
  binary,  ///< protobuf wire format (AutoDist's files)
  text,    ///< protobuf text format
};

/// AutoDist's strategy id for a UTC time given in microseconds since the Unix epoch:
/// strftime "%Y%m%dT%H%M%SM%f", e.g. "20200131T235959M000123". Times before 1970 or
/// after 9999 are clamped into that range.
[[nodiscard]] std::string format_strategy_id(std::int64_t unix_time_us);

/// Where AutoDist keeps a strategy by default: "/tmp/autodist/strategies/<id>".
[[nodiscard]] std::string default_strategy_path(std::string_view id);

/// Sets `strategy.path` to `path` (the file it is about to be written to, so that the
/// file names itself, as AutoDist's serialize() does) and encodes it.
[[nodiscard]] Result<std::string> serialize_strategy(pb::autodist::Strategy& strategy, std::string_view path,
                                                     StrategyFormat format);

/// Decodes a strategy. Binary: any bytes protobuf rejects are malformed. Text: errors
/// name `source`, the line and the column.
[[nodiscard]] Result<pb::autodist::Strategy> parse_strategy(std::string_view bytes, StrategyFormat format,
                                                            std::string_view source);

/// The text format of a strategy (for printing).
[[nodiscard]] std::string to_text(const pb::autodist::Strategy& strategy);

}  // namespace apiary::core::strategy
