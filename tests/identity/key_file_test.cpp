#include "messages/identity/key_file.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "messages/identity/key_proto.hpp"
#include "messages/identity/peer_id.hpp"
#include "tests/identity/test_hex.hpp"

using apiary::errc;
using apiary::messages::Ed25519PrivateKey;
using apiary::test::from_hex;
using apiary::test::to_hex;
namespace msg = apiary::messages;
namespace fs = std::filesystem;

namespace {

/// A fresh directory under the system temp dir, removed with its contents at scope exit.
class temp_dir {
 public:
  temp_dir() {
    std::string pattern = (fs::temp_directory_path() / "apiary-identity-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~temp_dir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  std::string file(const char* name) const { return (path_ / name).string(); }
  std::size_t entries() const {
    return static_cast<std::size_t>(
        std::distance(fs::directory_iterator(path_), fs::directory_iterator()));
  }

 private:
  fs::path path_;
};

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
  REQUIRE(out.good());
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

unsigned mode_of(const std::string& path) {
  struct stat info {};
  REQUIRE(::stat(path.c_str(), &info) == 0);
  return info.st_mode & 0777;
}

/// Sets the process umask for the scope, so modes do not depend on the caller's.
struct scoped_umask {
  explicit scoped_umask(mode_t mask) : old(::umask(mask)) {}
  ~scoped_umask() { ::umask(old); }
  mode_t old;
};

// The libp2p peer-id spec's Ed25519 test key (PrivateKey protobuf, hex).
constexpr const char* spec_private_key =
    "080112407e0830617c4a7de83925dfb2694556b12936c477a0e1feb2e148ec9da60fee7d1ed1e8fae2c4a144b8be"
    "8fd4b47bf3d3b34b871c3cacf6010f0e42d474fce27e";

}  // namespace

TEST_CASE("key file: save then load gives the same key, mode 0600", "[identity][key_file]") {
  temp_dir dir;
  scoped_umask open_umask(0);  // a umask of 0 would give 0666 to a careless writer
  auto key = Ed25519PrivateKey::generate();
  REQUIRE(key.ok());
  const std::string path = dir.file("node.key");
  REQUIRE(msg::save_key_file(path, *key).ok());

  CHECK(mode_of(path) == 0600);
  CHECK(dir.entries() == 1);  // no temporary file left behind
  std::string bytes = read_file(path);
  CHECK(bytes.size() == 68);
  CHECK(to_hex(bytes.substr(0, 4)) == "08011240");
  CHECK(bytes.substr(4, 32) == key->seed());
  CHECK(bytes.substr(36) == key->public_key().bytes());

  auto loaded = msg::load_key_file(path);
  REQUIRE(loaded.ok());
  CHECK(loaded->seed() == key->seed());
  CHECK(loaded->public_key() == key->public_key());
}

TEST_CASE("key file: save replaces a world-readable file and leaves it 0600",
          "[identity][key_file]") {
  temp_dir dir;
  const std::string path = dir.file("node.key");
  write_file(path, "old contents");
  REQUIRE(::chmod(path.c_str(), 0644) == 0);
  auto key = Ed25519PrivateKey::generate();
  REQUIRE(key.ok());
  REQUIRE(msg::save_key_file(path, *key).ok());
  CHECK(mode_of(path) == 0600);
  auto loaded = msg::load_key_file(path);
  REQUIRE(loaded.ok());
  CHECK(loaded->public_key() == key->public_key());
}

TEST_CASE("key file: reads the libp2p spec's Ed25519 key", "[identity][key_file]") {
  temp_dir dir;
  const std::string path = dir.file("spec.key");
  write_file(path, from_hex(spec_private_key));
  auto key = msg::load_key_file(path);
  REQUIRE(key.ok());
  CHECK(to_hex(key->public_key().bytes()) ==
        "1ed1e8fae2c4a144b8be8fd4b47bf3d3b34b871c3cacf6010f0e42d474fce27e");
  CHECK(msg::PeerId::from_public_key(key->public_key()).to_string() ==
        "12D3KooWBtg3aaRMjxwedh83aGiUkwSxDwUZkzuJcfaqUmo7R3pq");
  CHECK(to_hex(msg::encode_private_key_proto(*key)) == spec_private_key);
}

TEST_CASE("key file: load errors say what is wrong", "[identity][key_file]") {
  temp_dir dir;
  const std::string path = dir.file("node.key");
  std::string valid = from_hex(spec_private_key);

  SECTION("missing file") {
    auto r = msg::load_key_file(path);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == errc::not_found);
    CHECK_THAT(r.error().message, Catch::Contains(path) && Catch::Contains("no such file"));
  }
  SECTION("short garbage") {
    write_file(path, "hello");
    auto r = msg::load_key_file(path);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == errc::malformed);
    CHECK_THAT(r.error().message, Catch::Contains(path) && Catch::Contains("expected 68 bytes") &&
                                      Catch::Contains("has 5"));
  }
  SECTION("oversized file") {
    write_file(path, std::string(10000, 'k'));
    auto r = msg::load_key_file(path);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == errc::malformed);
    CHECK_THAT(r.error().message, Catch::Contains("more than 4096"));
  }
  SECTION("right size, not a protobuf key") {
    write_file(path, std::string(68, '\xff'));
    auto r = msg::load_key_file(path);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == errc::malformed);
    CHECK_THAT(r.error().message, Catch::Contains(path) && Catch::Contains("PrivateKey"));
  }
  SECTION("an RSA key type") {
    valid[1] = 0x00;
    write_file(path, valid);
    auto r = msg::load_key_file(path);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == errc::unsupported);
    CHECK_THAT(r.error().message, Catch::Contains("RSA") && Catch::Contains("Ed25519"));
  }
  SECTION("a public half that does not match the seed") {
    valid[40] = static_cast<char>(valid[40] ^ 0x01);
    write_file(path, valid);
    auto r = msg::load_key_file(path);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == errc::malformed);
    CHECK_THAT(r.error().message, Catch::Contains("does not match"));
  }
  SECTION("a 32-byte data field") {
    write_file(path, from_hex("08011220") + valid.substr(4, 32) + std::string(32, '\0'));
    auto r = msg::load_key_file(path);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == errc::malformed);
  }
  SECTION("a directory") {
    auto r = msg::load_key_file(dir.file(""));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == errc::io);
  }
}

TEST_CASE("key file: save into a missing directory fails with the path", "[identity][key_file]") {
  temp_dir dir;
  auto key = Ed25519PrivateKey::generate();
  REQUIRE(key.ok());
  const std::string path = dir.file("no-such-dir/node.key");
  auto r = msg::save_key_file(path, *key);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == errc::io);
  CHECK_THAT(r.error().message, Catch::Contains(path));
}

TEST_CASE("key file: load_or_create creates once, then loads", "[identity][key_file]") {
  temp_dir dir;
  scoped_umask open_umask(0);
  const std::string path = dir.file("node.key");
  auto created = msg::load_or_create_key_file(path);
  REQUIRE(created.ok());
  CHECK(mode_of(path) == 0600);
  CHECK(dir.entries() == 1);

  auto again = msg::load_or_create_key_file(path);
  REQUIRE(again.ok());
  CHECK(again->seed() == created->seed());
  CHECK(again->public_key() == created->public_key());
}

TEST_CASE("key file: load_or_create never overwrites a bad file", "[identity][key_file]") {
  temp_dir dir;
  const std::string path = dir.file("node.key");
  write_file(path, "not a key");
  auto r = msg::load_or_create_key_file(path);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == errc::malformed);
  CHECK(read_file(path) == "not a key");
}
