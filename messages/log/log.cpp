#include "messages/log/log.hpp"

#include <chrono>
#include <cstdlib>

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

namespace apiary::log {

const char* to_string(Level level) {
  switch (level) {
    case Level::trace: return "trace";
    case Level::debug: return "debug";
    case Level::info: return "info";
    case Level::warn: return "warn";
    case Level::error: return "error";
    case Level::off: return "off";
  }
  return "?";
}

Result<Level> parse_level(std::string_view text) {
  for (Level l : {Level::trace, Level::debug, Level::info, Level::warn, Level::error, Level::off}) {
    if (text == to_string(l)) return l;
  }
  if (text == "warning") return Level::warn;
  return make_error(errc::invalid_argument, "expected a log level (trace, debug, info, warn, error, off), got '{}'",
                    text);
}

namespace {

bool needs_quotes(std::string_view v) {
  if (v.empty()) return true;
  for (char c : v) {
    if (c == ' ' || c == '"' || c == '=' || c == '\n' || c == '\t') return true;
  }
  return false;
}

/// `v` as a JSON string body (quotes, backslashes and control characters escaped).
std::string escaped(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(static_cast<unsigned char>(c)));
        } else {
          out.push_back(c);
        }
    }
  }
  return out;
}

double system_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string format_text(const Record& r) {
  std::string out = fmt::format("{:.6f} {} {}", r.time, to_string(r.level), r.event);
  for (const auto& f : r.fields) {
    out += fmt::format(needs_quotes(f.value) ? " {}=\"{}\"" : " {}={}", f.key,
                       needs_quotes(f.value) ? escaped(f.value) : f.value);
  }
  return out;
}

std::string format_json(const Record& r) {
  std::string out = fmt::format(R"({{"time":{:.6f},"level":"{}","event":"{}")", r.time, to_string(r.level),
                                escaped(r.event));
  for (const auto& f : r.fields) out += fmt::format(R"(,"{}":"{}")", escaped(f.key), escaped(f.value));
  out += "}";
  return out;
}

Logger::Logger(Sink sink, Level level, Clock clock) : sink_(std::move(sink)), level_(level), clock_(std::move(clock)) {}

void Logger::set_sink(Sink sink) {
  std::lock_guard<std::mutex> lock(mutex_);
  sink_ = std::move(sink);
}

void Logger::set_clock(Clock clock) {
  std::lock_guard<std::mutex> lock(mutex_);
  clock_ = std::move(clock);
}

void Logger::write(Level level, std::string_view name, const std::vector<Field>& fields) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!sink_) return;
  sink_(Record{level, clock_ ? clock_() : system_seconds(), name, fields});
}

Sink stderr_sink(bool json) {
  auto logger = spdlog::get("apiary");
  if (!logger) {
    logger = spdlog::stderr_logger_mt("apiary");
    logger->set_pattern("%v");  // the record carries its own time and level
    logger->set_level(spdlog::level::trace);
  }
  return [logger, json](const Record& r) { logger->log(spdlog::level::info, json ? format_json(r) : format_text(r)); };
}

Logger& process_logger() {
  static Logger logger = [] {
    const char* env = std::getenv("APIARY_LOG");
    Level level = Level::warn;
    if (env != nullptr) {
      if (auto parsed = parse_level(env)) level = *parsed;
    }
    const char* json = std::getenv("APIARY_LOG_JSON");
    return Logger(stderr_sink(json != nullptr && std::string_view(json) == "1"), level);
  }();
  return logger;
}

Status set_process_level(std::string_view text) {
  auto level = parse_level(text);
  if (!level) return level.error();
  process_logger().set_level(*level);
  return ok_status();
}

}  // namespace apiary::log
