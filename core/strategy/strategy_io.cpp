#include "core/strategy/strategy_io.hpp"

#include <algorithm>
#include <limits>

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/text_format.h>

namespace apiary::core::strategy {
namespace {

/// Keeps the first text-format error with its position.
class FirstError : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column, const std::string& message) override {
    if (!has_) {
      has_ = true;
      line_ = line + 1;  // protobuf counts from 0
      column_ = column + 1;
      message_ = message;
    }
  }
  void AddWarning(int, google::protobuf::io::ColumnNumber, const std::string&) override {}
  bool has_ = false;
  int line_ = 0;
  int column_ = 0;
  std::string message_;
};

/// Days since 1970-01-01 -> (year, month, day), proleptic Gregorian (Hinnant's
/// civil_from_days).
void civil_from_days(std::int64_t z, std::int64_t& y, unsigned& m, unsigned& d) {
  z += 719468;
  const std::int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const auto doe = static_cast<unsigned>(z - era * 146097);
  const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const unsigned mp = (5 * doy + 2) / 153;
  d = doy - (153 * mp + 2) / 5 + 1;
  m = mp < 10 ? mp + 3 : mp - 9;
  y = static_cast<std::int64_t>(yoe) + era * 400 + (m <= 2 ? 1 : 0);
}

}  // namespace

std::string format_strategy_id(std::int64_t unix_time_us) {
  constexpr std::int64_t max_us = 253402300799999999;  // 9999-12-31T23:59:59.999999
  unix_time_us = std::clamp<std::int64_t>(unix_time_us, 0, max_us);
  const std::int64_t seconds = unix_time_us / 1000000;
  const std::int64_t micros = unix_time_us % 1000000;
  const std::int64_t days = seconds / 86400;
  const std::int64_t rest = seconds % 86400;
  std::int64_t year = 0;
  unsigned month = 0, day = 0;
  civil_from_days(days, year, month, day);
  return fmt::format("{:04}{:02}{:02}T{:02}{:02}{:02}M{:06}", year, month, day, rest / 3600, (rest / 60) % 60,
                     rest % 60, micros);
}

std::string default_strategy_path(std::string_view id) { return "/tmp/autodist/strategies/" + std::string(id); }

Result<std::string> serialize_strategy(pb::autodist::Strategy& strategy, std::string_view path,
                                       StrategyFormat format) {
  strategy.set_path(std::string(path));
  if (format == StrategyFormat::text) return to_text(strategy);
  std::string bytes;
  if (!strategy.SerializeToString(&bytes)) {
    return make_error(errc::internal, "serializing strategy \"{}\" failed; it exceeds protobuf's 2 GiB limit",
                      strategy.id());
  }
  return bytes;
}

Result<pb::autodist::Strategy> parse_strategy(std::string_view bytes, StrategyFormat format,
                                              std::string_view source) {
  pb::autodist::Strategy out;
  if (format == StrategyFormat::binary) {
    if (bytes.size() > static_cast<std::size_t>(std::numeric_limits<int>::max()) ||
        !out.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
      return make_error(errc::malformed, "{}: expected a binary Strategy message ({} bytes are not one); if the file "
                        "is text format, read it as text", source, bytes.size());
    }
    return out;
  }
  if (bytes.size() > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
    return make_error(errc::too_large, "{}: {} bytes of text exceed protobuf's 2 GiB limit", source, bytes.size());
  }
  google::protobuf::TextFormat::Parser parser;
  FirstError errors;
  parser.RecordErrorsTo(&errors);
  google::protobuf::io::ArrayInputStream input(bytes.data(), static_cast<int>(bytes.size()));
  if (!parser.Parse(&input, &out)) {
    return make_error(errc::malformed, "{}:{}:{}: invalid Strategy text format: {}; fix the file at that position",
                      source, errors.line_, errors.column_, errors.has_ ? errors.message_ : "parse failed");
  }
  return out;
}

std::string to_text(const pb::autodist::Strategy& strategy) {
  std::string text;
  google::protobuf::TextFormat::PrintToString(strategy, &text);
  return text;
}

}  // namespace apiary::core::strategy
