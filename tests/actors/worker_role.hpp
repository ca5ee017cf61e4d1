#pragma once
// A role for tests of the role hosts (role_actor_test, direct_host_test).
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/mux.hpp"
#include "core/role.hpp"

namespace apiary::testing {

using namespace apiary::core;
using namespace std::chrono_literals;

/// "double" completes at once; "later" arms a timer and completes when it fires;
/// "ask" asks role `args` to double 21; "never" never completes.
class Worker final : public Role {
 public:
  explicit Worker(Duration later = 1s) : later_(later) {}
  std::vector<std::string> handles() const override { return {}; }
  Effects on(TimePoint now, Input input) override {
    if (auto* c = std::get_if<LocalCall>(&input)) {
      if (c->method == "double") return {Complete{c->op, Value::of(*c->args.as<int>() * 2)}};
      if (c->method == "later") {
        pending_ = c->op;
        return {SetTimer{1, now + later_}};
      }
      if (c->method == "ask") {
        asker_ = c->op;
        return {Ask{5, *c->args.as<std::string>(), "double", Value::of(21)}};
      }
      if (c->method == "never") return {};
      return {unknown_method(*c, "the worker")};
    }
    if (std::holds_alternative<TimerFired>(input)) return {Complete{pending_, Value::of(std::string("fired"))}};
    if (auto* r = std::get_if<LocalReply>(&input)) return {Complete{asker_, r->result}};
    return {};
  }

 private:
  Duration later_;
  OpId pending_ = 0;
  OpId asker_ = 0;
};

/// A Mux of two Workers, roles "a" and "b": "a" asking "b" is answered with 42.
inline std::unique_ptr<Mux> worker_mux() {
  auto mux = std::make_unique<Mux>();
  REQUIRE(mux->add("a", std::make_unique<Worker>()).ok());
  REQUIRE(mux->add("b", std::make_unique<Worker>()).ok());
  return mux;
}

}  // namespace apiary::testing
