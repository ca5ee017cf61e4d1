#pragma once
// A swarm authority for tests of authorization: a fresh Ed25519 key in a key file of its
// own (RuntimeOptions::authorization.authority_file), removed when the test is done.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include <catch2/catch.hpp>

#include "api/runtime.hpp"
#include "messages/identity/ed25519.hpp"
#include "messages/identity/key_file.hpp"

namespace apiary::testing {

class AuthorityFile {
 public:
  AuthorityFile() {
    std::string pattern = (std::filesystem::temp_directory_path() / "apiary-authority-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    dir_ = pattern;
    path_ = dir_ + "/authority.key";
    auto key = messages::Ed25519PrivateKey::generate();
    REQUIRE(key.ok());
    REQUIRE(messages::save_key_file(path_, *key).ok());
    key_ = *key;
  }
  ~AuthorityFile() {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  AuthorityFile(const AuthorityFile&) = delete;
  AuthorityFile& operator=(const AuthorityFile&) = delete;

  [[nodiscard]] const std::string& path() const { return path_; }
  /// The authority's key (to mint tokens of one's own making).
  [[nodiscard]] const messages::Ed25519PrivateKey& key() const { return *key_; }
  /// Authorization as a member of this authority's swarm.
  [[nodiscard]] Authorization member() const {
    Authorization a;
    a.authority_file = path_;
    return a;
  }

 private:
  std::string dir_;
  std::string path_;
  std::optional<messages::Ed25519PrivateKey> key_;
};

}  // namespace apiary::testing
