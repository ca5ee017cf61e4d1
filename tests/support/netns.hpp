#pragma once
/// Network namespaces a test makes and removes (hosts, NAT routers): each is noted once
/// made, so that only this process's are removed, in reverse order.
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/support/process.hpp"

namespace apiary::testing {

class Namespaces {
 public:
  Namespaces() = default;
  ~Namespaces() {
    for (auto it = made_.rbegin(); it != made_.rend(); ++it) {
      (void)std::system(("ip netns del " + *it + " 2>/dev/null").c_str());
    }
  }
  Namespaces(const Namespaces&) = delete;
  Namespaces& operator=(const Namespaces&) = delete;

  /// Makes namespace `name`, then runs `setup` (a shell command line); false, with why()
  /// saying what failed, when either fails.
  bool make(const std::string& name, const std::string& setup) {
    const auto added = run_shell("ip netns add " + name);
    if (added.first != 0) {
      why_ = "cannot make network namespaces here: " + added.second;
      return false;
    }
    made_.push_back(name);
    const auto set = run_shell("/bin/sh -c '" + setup + "'");
    if (set.first != 0) why_ = "cannot set up network namespace " + name + ": " + set.second;
    return set.first == 0;
  }
  /// Empty while every namespace was made; else why not (or what the owner set).
  [[nodiscard]] const std::string& why() const { return why_; }
  void set_why(std::string why) { why_ = std::move(why); }

  /// Runs `command` (stderr merged): its exit status and output.
  static std::pair<int, std::string> run_shell(const std::string& command) {
    Process p({"/bin/sh", "-c", "exec " + command + " 2>&1"});
    std::string text;
    while (auto line = p.read_line(std::chrono::seconds(60))) text += *line + "\n";
    return {p.wait(std::chrono::seconds(60)), text};
  }

 private:
  std::vector<std::string> made_;
  std::string why_;
};

}  // namespace apiary::testing
