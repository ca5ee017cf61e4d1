#pragma once
/// Structured logs: an event name and key=value fields, a level set at run time, and an
/// injected sink (the process's sink writes through spdlog to stderr, as text or JSON
/// lines; tests and the simulator inject their own and log in their own time). Library
/// code logs here, never to a stream. core/ does not log: it returns effects.
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "messages/result.hpp"

namespace apiary::log {

/// Severity, lowest first; `off` disables a logger.
enum class Level : std::uint8_t { trace, debug, info, warn, error, off };

/// "trace", "debug", "info", "warn", "error", "off".
[[nodiscard]] const char* to_string(Level level);
/// The level named `text` (as to_string, case-sensitive; "warning" also names warn).
[[nodiscard]] Result<Level> parse_level(std::string_view text);

/// One key=value of an event.
struct Field {
  std::string key;
  std::string value;
};

/// One event as a sink sees it.
struct Record {
  Level level = Level::info;
  double time = 0;  ///< seconds on the logger's clock (Unix time, or virtual time)
  std::string_view event;
  const std::vector<Field>& fields;
};

/// Where events go; called under the logger's lock, one event at a time.
using Sink = std::function<void(const Record&)>;
/// The logger's time in seconds.
using Clock = std::function<double()>;

/// `time level event k=v k=v ...`; a value with a space, quote or '=' is quoted.
[[nodiscard]] std::string format_text(const Record& record);
/// One JSON object: {"time":..,"level":"..","event":"..","k":"v",...}.
[[nodiscard]] std::string format_json(const Record& record);

class Logger {
 public:
  /// Events at `level` or above go to `sink`, stamped with `clock` (null: system time).
  explicit Logger(Sink sink, Level level = Level::info, Clock clock = nullptr);

  [[nodiscard]] Level level() const { return level_; }
  void set_level(Level level) { level_ = level; }
  void set_sink(Sink sink);
  void set_clock(Clock clock);
  /// Whether an event at `level` would be written (check before costly fields).
  [[nodiscard]] bool enabled(Level level) const { return level != Level::off && level >= level_; }

  /// Logs event `name` with fields given as key, value pairs: log(Level::warn,
  /// "gateway.peer_down", "peer", peer, "why", why). Values are formatted with fmt.
  template <class... KV>
  void log(Level level, std::string_view name, const KV&... kv) {
    static_assert(sizeof...(KV) % 2 == 0, "fields come as key, value pairs");
    if (!enabled(level)) return;
    std::vector<Field> fields;
    fields.reserve(sizeof...(KV) / 2);
    add(fields, kv...);
    write(level, name, fields);
  }

 private:
  static void add(std::vector<Field>&) {}
  template <class V, class... Rest>
  static void add(std::vector<Field>& out, std::string_view key, const V& value, const Rest&... rest) {
    out.push_back(Field{std::string(key), fmt::format("{}", value)});
    add(out, rest...);
  }
  void write(Level level, std::string_view name, const std::vector<Field>& fields);

  std::mutex mutex_;
  Sink sink_;
  Level level_;
  Clock clock_;
};

/// The sink of processes: spdlog's stderr logger, each event as format_text or, with
/// `json`, format_json.
[[nodiscard]] Sink stderr_sink(bool json);

/// The process's logger (apps, actors, transport log here). Starts at the level of the
/// environment variable APIARY_LOG (default warn) and in text, or JSON lines when
/// APIARY_LOG_JSON=1.
[[nodiscard]] Logger& process_logger();

/// Sets the process logger's level from `text` (a --log-level flag); the error names
/// the accepted levels.
[[nodiscard]] Status set_process_level(std::string_view text);

}  // namespace apiary::log
