#pragma once
/// An in-memory network of core::dht::Node for the node tests: calls are queued and
/// delivered in FIFO order with the caller's address, replies travel back the same way,
/// calls to a killed node fail at once, timers fire when the clock is advanced past them.
/// Deterministic: the same calls give the same run.
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/dht/node.hpp"

namespace apiary::core::dht::testing {

class NodeNetwork {
 public:
  /// Every node's DHT time is 1.7e9 + now.
  static constexpr double k_epoch = 1.7e9;

  /// Adds a node with id `id` (address /ip4/10.0.<n / 250>.<n % 250 + 1>/tcp/4000, a
  /// client's in 10.1.x.y: the network's name for it, the client itself has none) and
  /// returns it.
  Node& add(const NodeId& id, NodeConfig config = {}, std::shared_ptr<RecordValidator> validator = nullptr) {
    const bool client = config.protocol.client_mode;
    const PeerAddr addr(messages::Multiaddr{
        fmt::format("10.{}.{}.{}", client ? 1 : 0, nodes_.size() / 250, nodes_.size() % 250 + 1), false, 4000, {}, {}});
    if (client) clients_.insert(addr);
    nodes_[addr] = std::make_unique<Node>(id, client ? PeerAddr{} : addr, config, std::move(validator), k_epoch);
    addrs_[nodes_[addr].get()] = addr;
    order_.push_back(addr);
    return *nodes_[addr];
  }
  /// The address `node` was added under.
  const PeerAddr& addr(const Node& node) const { return addrs_.at(&node); }
  /// Every node's address, in the order added.
  const std::vector<PeerAddr>& order() const { return order_; }
  Node& node(const PeerAddr& addr) { return *nodes_.at(addr); }

  /// Bootstraps `node` from `peers` and runs the network until quiet; returns the result.
  OpResult start(Node& node, const std::vector<PeerAddr>& peers) {
    const OpId op = next_op_++;
    submit(node, node.start(now_, op, peers));
    return wait(node, op);
  }
  OpResult store(Node& node, std::vector<StoreItem> items, bool exclude_self = false) {
    const OpId op = next_op_++;
    submit(node, node.store(now_, op, std::move(items), exclude_self));
    return wait(node, op);
  }
  OpResult get(Node& node, const std::vector<NodeId>& keys, bool latest = false) {
    const OpId op = next_op_++;
    submit(node, node.get(now_, op, keys, latest));
    return wait(node, op);
  }
  OpResult find(Node& node, const std::vector<NodeId>& queries, std::size_t k, bool exclude_self = false) {
    const OpId op = next_op_++;
    submit(node, node.find_nearest(now_, op, queries, k, exclude_self));
    return wait(node, op);
  }

  /// The result of op `op` that `started` (the node's effects of starting it) began.
  OpResult finish(Node& node, OpId op, Effects started) {
    submit(node, std::move(started));
    return wait(node, op);
  }

  /// Kills the node at `addr`: calls to it fail from now on.
  void kill(const PeerAddr& addr) { dead_.insert(addr); }
  /// DHT time now.
  double dht_now() const { return k_epoch + to_seconds(now_); }
  TimePoint now() const { return now_; }
  /// Moves the clock by `d`, firing due timers (and running until quiet).
  void advance(Duration d) {
    const TimePoint end = now_ + d;
    while (true) {
      auto next = timers_.begin();
      for (auto it = timers_.begin(); it != timers_.end(); ++it) {
        if (it->second.at < next->second.at) next = it;
      }
      if (next == timers_.end() || next->second.at > end) break;
      auto [key, t] = *next;
      timers_.erase(next);
      now_ = std::max(now_, t.at);
      if (!dead_.count(key.first)) submit(*nodes_.at(key.first), nodes_.at(key.first)->on_timer(now_, key.second));
      run();
    }
    now_ = end;
  }
  /// Calls delivered so far.
  std::uint64_t calls() const { return calls_; }
  /// Completed ops of `node` that nobody waited for (e.g. started by a test by hand).
  std::vector<OpResult>& spare(Node& node) { return spare_[&node]; }

  /// Executes `fx` for `node` (queues its calls, replies and timers).
  void submit(Node& node, Effects fx) {
    const PeerAddr& from = addrs_.at(&node);
    for (auto& e : fx) {
      if (auto* c = std::get_if<Call>(&e)) {
        queue_.push_back(Message{true, from, c->peer, c->id, 0, c->handle, c->request});
      } else if (auto* r = std::get_if<Reply>(&e)) {
        auto it = inbound_.find({from, r->request});
        if (it == inbound_.end()) continue;
        Message m{false, from, it->second.first, it->second.second, 0, {}, {}};
        m.result = r->response;
        queue_.push_back(std::move(m));
        inbound_.erase(it);
      } else if (auto* t = std::get_if<SetTimer>(&e)) {
        timers_[{from, t->id}] = TimerAt{t->at};
      } else if (auto* ct = std::get_if<CancelTimer>(&e)) {
        timers_.erase({from, ct->id});
      }
    }
  }

  /// Delivers queued messages until none is left.
  void run() {
    while (!queue_.empty()) {
      Message m = std::move(queue_.front());
      queue_.pop_front();
      if (m.is_call) {
        ++calls_;
        auto target = nodes_.find(m.to);
        if (target == nodes_.end() || dead_.count(m.to)) {
          Message fail{false, m.to, m.from, m.call, 0, {}, {}};
          fail.result = make_error(errc::deadline_exceeded, "{} does not answer", m.to);
          queue_.push_back(std::move(fail));
          continue;
        }
        const RequestId rid = next_request_++;
        inbound_[{m.to, rid}] = {m.from, m.call};
        // A client has no address a callee could call back.
        const PeerAddr from = clients_.count(m.from) != 0 ? PeerAddr{} : m.from;
        submit(*target->second, target->second->on_request(now_, rid, m.handle, from, m.body));
      } else {
        if (dead_.count(m.to)) continue;
        Node& caller = *nodes_.at(m.to);
        submit(caller, caller.on_response(now_, m.call, m.result));
        for (auto& r : caller.take_completed()) spare_[&caller].push_back(std::move(r));
      }
    }
  }

 private:
  struct Message {
    bool is_call = true;
    PeerAddr from, to;
    CallId call = 0;
    RequestId request = 0;
    std::string handle, body;
    Result<std::string> result{std::string{}};
  };
  struct TimerAt {
    TimePoint at{};
  };

  OpResult wait(Node& node, OpId op) {
    run();
    for (auto& r : node.take_completed()) spare_[&node].push_back(std::move(r));
    auto& done = spare_[&node];
    for (auto it = done.begin(); it != done.end(); ++it) {
      if (it->op == op) {
        OpResult r = std::move(*it);
        done.erase(it);
        return r;
      }
    }
    OpResult missing;
    missing.op = op;
    missing.status = make_error(errc::internal, "op {} did not complete", op);
    return missing;
  }

  std::map<PeerAddr, std::unique_ptr<Node>> nodes_;
  std::map<const Node*, PeerAddr> addrs_;
  std::vector<PeerAddr> order_;
  std::set<PeerAddr> dead_;
  std::set<PeerAddr> clients_;
  std::deque<Message> queue_;
  std::map<std::pair<PeerAddr, RequestId>, std::pair<PeerAddr, CallId>> inbound_;
  std::map<std::pair<PeerAddr, TimerId>, TimerAt> timers_;
  std::map<const Node*, std::vector<OpResult>> spare_;
  TimePoint now_{};
  RequestId next_request_ = 1;
  OpId next_op_ = 1;
  std::uint64_t calls_ = 0;
};

}  // namespace apiary::core::dht::testing
