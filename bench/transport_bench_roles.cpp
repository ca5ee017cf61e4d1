#include "bench/transport_bench_roles.hpp"

#include <chrono>
#include <utility>

namespace apiary::bench::transport_bench {
namespace {

using namespace apiary::core;

class Echo final : public Role {
 public:
  explicit Echo(std::string handle) : handle_(std::move(handle)) {}
  std::vector<std::string> handles() const override { return {handle_}; }
  Effects on(TimePoint, Input input) override {
    if (auto* r = std::get_if<Request>(&input)) return {Reply{r->id, std::string(r->body.view())}};
    if (auto* c = std::get_if<LocalCall>(&input)) return {unknown_method(*c, "the echo role")};
    return {};
  }

 private:
  std::string handle_;
};

class Driver final : public Role {
 public:
  std::vector<std::string> handles() const override { return {}; }
  Effects on(TimePoint now, Input input) override {
    if (auto* c = std::get_if<LocalCall>(&input)) {
      const auto* order = c->args.as<DriveOrder>();
      if (c->method != "drive") return {unknown_method(*c, "the driver role")};
      if (order == nullptr || order->calls == 0 || op_ != 0)
        return {Complete{c->op, make_error(errc::invalid_argument, "drive takes a DriveOrder with calls > 0, one "
                                                                   "run at a time")}};
      op_ = c->op;
      order_ = *order;
      rtt_us_.clear();
      rtt_us_.reserve(order_.calls);
      return issue(now);
    }
    if (auto* r = std::get_if<Response>(&input)) {
      if (op_ == 0 || r->call != next_) return {};
      Result<Value> failed{Value{}};
      if (!r->result) {
        failed = make_error(r->result.error().code, "call {} of {} to '{}' at {} failed: {}", rtt_us_.size() + 1,
                            order_.calls, order_.handle, order_.peer, r->result.error().message);
      } else if (r->result->size() != order_.reply_bytes) {
        failed = make_error(errc::protocol, "'{}' answered {} bytes, expected {}", order_.handle, r->result->size(),
                            order_.reply_bytes);
      }
      if (!failed.ok()) return finish(std::move(failed));
      rtt_us_.push_back(std::chrono::duration<double, std::micro>(now - issued_at_).count());
      if (rtt_us_.size() == order_.calls) return finish(Value::of(std::move(rtt_us_)));
      return issue(now);
    }
    return {};
  }

 private:
  Effects issue(TimePoint now) {
    issued_at_ = now;
    return {unary_call(++next_, order_.peer, order_.handle, order_.payload, order_.timeout)};
  }
  Effects finish(Result<Value> result) {
    const OpId op = std::exchange(op_, 0);
    return {Complete{op, std::move(result)}};
  }

  DriveOrder order_;
  OpId op_ = 0;
  CallId next_ = 0;
  TimePoint issued_at_{};
  std::vector<double> rtt_us_;
};

}  // namespace

std::unique_ptr<core::Role> make_echo_role(std::string handle) { return std::make_unique<Echo>(std::move(handle)); }

std::unique_ptr<core::Role> make_driver_role() { return std::make_unique<Driver>(); }

}  // namespace apiary::bench::transport_bench
