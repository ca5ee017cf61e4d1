// State download between real `apiary average` processes: the highest-priority donor
// is asked first, a killed donor is skipped for the next one, and a donor of another
// model is refused with a clear error.
#include <catch2/catch.hpp>

#include <csignal>

#include "tests/support/apiary_command.hpp"

using namespace apiary;
using namespace std::chrono_literals;

namespace {

/// A running `apiary average`; `addr` is its multiaddr with /p2p/.
struct Peer {
  std::unique_ptr<testing::Process> proc;
  std::string addr;
};

Peer spawn(const std::string& args) {
  Peer p;
  p.proc = testing::spawn_apiary("average " + args + " 2>&1");
  p.addr = testing::await_listening(*p.proc);
  return p;
}

/// Output lines of a peer until it exits, and its exit status.
std::pair<std::string, int> finish(Peer& p) {
  std::string out;
  while (auto line = p.proc->read_line(60s)) out += *line + "\n";
  return {out, p.proc->wait(30s)};
}

}  // namespace

TEST_CASE("a newcomer loads the state of the highest-priority donor, then of the next", "[integration][averaging]") {
  Peer low = spawn("--values 1,1,1 --steps 0 --share-state 1 --linger 60");
  Peer high = spawn("--values 2,2,2 --steps 0 --share-state 5 --linger 60 --initial-peers " + low.addr);
  // Both declarations are stored once the donors are up; a newcomer reads them.
  {
    Peer newcomer = spawn("--values 0,0,0 --steps 0 --load-state --linger 0 --initial-peers " + low.addr);
    auto [out, rc] = finish(newcomer);
    INFO(out);
    CHECK(rc == 0);
    CHECK(out.find("loaded state from " + high.addr) != std::string::npos);
    CHECK(out.find("values 2 2 2") != std::string::npos);
  }
  high.proc->kill(SIGKILL);
  (void)high.proc->wait(10s);
  {
    Peer newcomer = spawn("--values 0,0,0 --steps 0 --load-state --linger 0 --initial-peers " + low.addr);
    auto [out, rc] = finish(newcomer);
    INFO(out);
    CHECK(rc == 0);
    CHECK(out.find("loaded state from " + low.addr) != std::string::npos);
    CHECK(out.find("values 1 1 1") != std::string::npos);
  }
  {
    // Another model: every donor is refused, and the error says why for each.
    Peer newcomer = spawn("--values 0,0 --steps 0 --load-state --linger 0 --initial-peers " + low.addr);
    auto [out, rc] = finish(newcomer);
    INFO(out);
    CHECK(rc == 1);
    CHECK(out.find("expected shape [2], got [3]") != std::string::npos);
  }
  low.proc->kill(SIGTERM);
}
