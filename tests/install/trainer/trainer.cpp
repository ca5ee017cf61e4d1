// A C++ trainer outside apiary's tree: two peers, each a DHT node with an averager, on
// loopback; each averages its vector with the other once. Prints the averaged vectors and
// exits 0 when both hold the mean.
#include <cstdio>
#include <memory>
#include <vector>

#include "api/averager.hpp"
#include "api/dht.hpp"

int main() {
  using namespace apiary;
  std::vector<std::unique_ptr<Dht>> dhts;
  std::vector<std::unique_ptr<Averager>> averagers;
  const std::vector<std::vector<float>> values{{1.0f, 2.0f, 3.0f}, {3.0f, 6.0f, 9.0f}};
  for (const auto& v : values) {
    DhtOptions d;
    if (!dhts.empty()) d.initial_peers = dhts[0]->visible_addrs();
    auto dht = Dht::start(d);
    if (!dht) {
      std::fprintf(stderr, "dht: %s\n", dht.error().what().c_str());
      return 1;
    }
    dhts.push_back(std::move(*dht));
    AveragerOptions o;
    o.prefix = "trainer";
    o.tensors = {v};
    o.target_group_size = 2;
    o.min_matchmaking_time = 1.0;
    o.request_timeout = 1.0;
    auto averager = Averager::start(*dhts.back(), o);
    if (!averager) {
      std::fprintf(stderr, "averager: %s\n", averager.error().what().c_str());
      return 1;
    }
    averagers.push_back(std::move(*averager));
  }
  AveragerStepOptions step;
  step.timeout = 30;
  auto first = averagers[0]->step(step);
  auto second = averagers[1]->step(step);
  auto a = first.get();
  auto b = second.get();
  if (!a || !b) {
    std::fprintf(stderr, "step: %s\n", (!a ? a.error() : b.error()).what().c_str());
    return 1;
  }
  int status = 0;
  for (const auto& averager : averagers) {
    const auto t = averager->tensors()[0];
    std::printf("averaged: %g %g %g\n", t[0], t[1], t[2]);
    if (t != std::vector<float>{2.0f, 4.0f, 6.0f}) status = 1;
  }
  averagers.clear();
  for (auto& d : dhts) d->stop();
  return status;
}
