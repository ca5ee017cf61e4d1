#include "core/averaging/state_roles.hpp"

#include <utility>

#include "core/dht/node_role.hpp"

namespace apiary::core::averaging {

namespace {

/// The one timer of a StateSharingRole: the next declaration.
constexpr TimerId k_declare_timer = 1;

}  // namespace

StateSharingRole::StateSharingRole(StateSharingConfig config) : config_(std::move(config)) {
  if (config_.priority) {
    // A NaN priority is refused by the facade; here it only means "not declaring".
    if (auto value = encode_sharing_priority(config_.priority)) value_ = std::move(value.value());
  }
}

Effects StateSharingRole::on(TimePoint now, Input input) {
  if (std::holds_alternative<Start>(input)) return declare(now);
  if (auto* t = std::get_if<TimerFired>(&input)) return t->id == k_declare_timer ? declare(now) : Effects{};
  if (auto* r = std::get_if<Request>(&input)) {
    if (!config_.state_stream) return serve_state_stream(r->id, std::vector<std::string>{});
    return serve_state_stream(r->id, config_.state_stream());
  }
  if (auto* reply = std::get_if<LocalReply>(&input)) {
    if (!reply->result.ok()) return {};
    const auto* result = reply->result->as<dht::OpResult>();
    if (result != nullptr && result->status.ok() && !result->stored.empty() && result->stored[0]) ++stored_;
    return {};
  }
  if (auto* c = std::get_if<LocalCall>(&input)) {
    if (c->method != k_set_priority_method) return {unknown_method(*c, "the state sharing role")};
    const auto* priority = c->args.as<std::optional<double>>();
    if (priority == nullptr) {
      return {Complete{c->op, make_error(errc::invalid_argument, "'{}' takes an optional<double>, got a {}",
                                         k_set_priority_method, c->args.type_name())}};
    }
    std::string value;
    if (*priority) {
      auto encoded = encode_sharing_priority(*priority);
      if (!encoded) return {Complete{c->op, encoded.error()}};
      value = std::move(encoded.value());
    }
    const bool changed = value != value_;
    config_.priority = *priority;
    value_ = std::move(value);
    Effects fx;
    if (changed) fx = declare(now);  // nothing when it stops declaring: the last one expires
    fx.push_back(Complete{c->op, Value{}});
    return fx;
  }
  return {};
}

Effects StateSharingRole::declare(TimePoint now) {
  if (value_.empty() || !(config_.declare_period > 0)) return {};
  dht::StoreItem item{dht::NodeId::of_str_key(state_sharing_key(config_.prefix)), state_sharing_subkey(config_.peer_id),
                      value_, 0};
  const double period = config_.declare_period;
  dht::NodeOp op = [item = std::move(item), period](dht::Node& node, TimePoint at, OpId id) {
    dht::StoreItem fresh = item;
    fresh.expiration = node.dht_time(at) + period;
    return node.store(at, id, {fresh});
  };
  ++declared_;
  const auto half = std::chrono::duration_cast<Duration>(std::chrono::duration<double>(period / 2));
  return {Ask{next_ask_++, config_.dht_role, dht::k_run_method, Value::of(std::move(op))},
          SetTimer{k_declare_timer, now + half}};
}

Effects StateLoadingRole::on(TimePoint now, Input input) {
  if (auto* c = std::get_if<LocalCall>(&input)) {
    if (c->method != k_load_method) return {unknown_method(*c, "the state loading role")};
    const auto* config = c->args.as<StateLoaderConfig>();
    if (config == nullptr) {
      return {Complete{c->op, make_error(errc::invalid_argument, "'{}' takes a StateLoaderConfig, got a {}",
                                         k_load_method, c->args.type_name())}};
    }
    if (loader_) {
      return {Complete{c->op, make_error(errc::unavailable, "expected one state download at a time, but one is "
                                                            "running; wait for it")}};
    }
    StateLoaderConfig settings = *config;
    settings.id_base = 0;  // the role's own id space
    auto loader = StateLoader::create(std::move(settings));
    if (!loader) return {Complete{c->op, loader.error()}};
    loader_.emplace(std::move(loader.value()));
    op_ = c->op;
    return settle(loader_->start(now));
  }
  if (!loader_) return {};
  if (auto* m = std::get_if<StreamMessage>(&input)) {
    return settle(loader_->on_message(now, m->call, std::string(m->message.view())));
  }
  if (auto* r = std::get_if<Response>(&input)) return settle(loader_->on_response(now, r->call, r->result));
  if (auto* t = std::get_if<TimerFired>(&input)) return settle(loader_->on_timer(now, t->id));
  return {};
}

Effects StateLoadingRole::settle(Effects fx) {
  name_caller(fx, caller_);
  addressing_.address(fx);
  if (!loader_ || !loader_->finished()) return fx;
  auto outcome = loader_->take_outcome();
  loader_.reset();
  if (!outcome->ok()) {
    fx.push_back(Complete{op_, outcome->error()});
  } else {
    fx.push_back(Complete{op_, Value::of(std::move(outcome->value()))});
  }
  return fx;
}

}  // namespace apiary::core::averaging
