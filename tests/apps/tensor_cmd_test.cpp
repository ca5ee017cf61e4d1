// `apiary tensor encode|decode` run as a real process: a round trip through files, and
// clear failures for bad input.
#include <catch2/catch.hpp>

#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "messages/tensor/codec.hpp"
#include "tests/support/process.hpp"

namespace msg = apiary::messages;
namespace pb = apiary::pb;
using apiary::testing::Process;
using apiary::testing::sibling_executable;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char pattern[] = "/tmp/apiary_tensor_cmd_XXXXXX";
    REQUIRE(mkdtemp(pattern) != nullptr);
    path = pattern;
  }
  ~TempDir() {
    for (const char* name : {"/in.raw", "/out.pb", "/back.raw", "/bad.pb"}) unlink((path + name).c_str());
    rmdir(path.c_str());
  }
};

void write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Runs `apiary args...`; returns the exit status and the first stdout line.
std::pair<int, std::string> run(std::vector<std::string> args) {
  args.insert(args.begin(), sibling_executable("apiary"));
  Process p(args);
  const auto line = p.read_line(std::chrono::seconds(30));
  return {p.wait(std::chrono::seconds(30)), line.value_or("")};
}

}  // namespace

TEST_CASE("apiary tensor encode then decode round-trips through files") {
  TempDir dir;
  const std::vector<float> values = {1.0f, -2.0f, 0.5f, 3.0f, 0.25f, -8.0f};
  write(dir.path + "/in.raw", std::string(reinterpret_cast<const char*>(values.data()), 24));

  auto [rc, line] = run({"tensor", "encode", "--codec", "float16", "--dtype", "float32", "--shape", "2,3",
                         dir.path + "/in.raw", dir.path + "/out.pb"});
  REQUIRE(rc == 0);
  CHECK(line.find("compression=FLOAT16") != std::string::npos);
  pb::Tensor message;
  REQUIRE(message.ParseFromString(read(dir.path + "/out.pb")));
  CHECK(message.compression() == pb::FLOAT16);
  CHECK(message.dtype() == "float32");
  CHECK(message.buffer().size() == 12);

  std::tie(rc, line) = run({"tensor", "decode", dir.path + "/out.pb", dir.path + "/back.raw"});
  REQUIRE(rc == 0);
  CHECK(line.find("dtype=float32 shape=2,3") != std::string::npos);
  CHECK(read(dir.path + "/back.raw") == read(dir.path + "/in.raw"));  // all exact in fp16
}

TEST_CASE("apiary tensor rejects bad input with a clear exit code") {
  TempDir dir;
  write(dir.path + "/in.raw", std::string(20, '\0'));
  SECTION("raw file of the wrong size: 1") {
    CHECK(run({"tensor", "encode", "--dtype", "float32", "--shape", "2,3", dir.path + "/in.raw",
               dir.path + "/out.pb"}).first == 1);
  }
  SECTION("unknown codec: 2") {
    CHECK(run({"tensor", "encode", "--codec", "ZSTD", "--shape", "5", dir.path + "/in.raw",
               dir.path + "/out.pb"}).first == 2);
  }
  SECTION("codec that does not apply to the dtype: 1") {
    CHECK(run({"tensor", "encode", "--codec", "FLOAT16", "--dtype", "int32", "--shape", "5",
               dir.path + "/in.raw", dir.path + "/out.pb"}).first == 1);
  }
  SECTION("not a Tensor message: 1") {
    write(dir.path + "/bad.pb", "\xff\xff\xff");
    CHECK(run({"tensor", "decode", dir.path + "/bad.pb", dir.path + "/back.raw"}).first == 1);
  }
  SECTION("missing input file: 1") {
    CHECK(run({"tensor", "decode", dir.path + "/none.pb", dir.path + "/back.raw"}).first == 1);
  }
}
