// Unit tests of what surrounds the kernels (label unit, no GPU needed): the backend-
// dispatching entry points, device_buffer on the CPU, backend selection, the device
// report, and what a build without CUDA or without a device answers.
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "cuda/buffer.hpp"
#include "cuda/device.hpp"
#include "cuda/kernels.hpp"
#include "cuda/nccl.hpp"
#include "tests/cuda/check.hpp"

using namespace apiary::cuda;

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("dispatch: the cpu backend runs the twins") {
  std::vector<float> acc = {1.0f, 2.0f, 3.0f};
  const std::vector<float> x = {10.0f, 20.0f, 30.0f};
  CHECK(weighted_accumulate(backend::cpu, acc.data(), x.data(), 0.5f, 3).ok());
  CHECK(acc == (std::vector<float>{6.0f, 12.0f, 18.0f}));
  std::vector<std::uint16_t> half(3);
  CHECK(cast_f32_to_f16(backend::cpu, half.data(), acc.data(), 3).ok());
  CHECK(half == (std::vector<std::uint16_t>{0x4600, 0x4a00, 0x4c80}));
  std::vector<float> back(3);
  CHECK(cast_f16_to_f32(backend::cpu, back.data(), half.data(), 3).ok());
  CHECK(back == acc);
  double total = -1.0;
  CHECK(sum(backend::cpu, acc.data(), 3, &total).ok());
  CHECK(total == 36.0);
}

TEST_CASE("dispatch: null pointers are refused, empty ranges are fine") {
  float one = 1.0f;
  const status refused = weighted_accumulate(backend::cpu, nullptr, &one, 1.0f, 1);
  CHECK(!refused.ok());
  CHECK_MSG(contains(refused.message(), "null pointer"), refused.message());
  CHECK(!cast_f32_to_f16(backend::cpu, nullptr, &one, 1).ok());
  CHECK(!cast_f16_to_f32(backend::cpu, &one, nullptr, 1).ok());
  double total = 0.0;
  CHECK(!sum(backend::cpu, nullptr, 1, &total).ok());
  CHECK(!sum(backend::cpu, &one, 1, nullptr).ok());
  CHECK(weighted_accumulate(backend::cpu, nullptr, nullptr, 1.0f, 0).ok());
  CHECK(weighted_accumulate(backend::cuda, nullptr, nullptr, 1.0f, 0).ok());
  total = 5.0;
  CHECK(sum(backend::cuda, nullptr, 0, &total).ok());
  CHECK(total == 0.0);
}

TEST_CASE("dispatch: a build without CUDA refuses the cuda backend with advice") {
  if (gpu::compiled()) return;  // covered by the gpu test on a CUDA build
  float acc = 1.0f, x = 2.0f;
  const status st = weighted_accumulate(backend::cuda, &acc, &x, 1.0f, 1);
  CHECK(!st.ok());
  CHECK_MSG(contains(st.message(), "APIARY_ENABLE_CUDA=ON"), st.message());
  CHECK(acc == 1.0f);
}

TEST_CASE("device_buffer: cpu allocate, upload, download, fill, move, bounds") {
  device_buffer empty;
  CHECK(empty.data() == nullptr);
  CHECK(device_buffer::allocate(backend::cpu, 0, &empty).ok());
  CHECK(empty.size_bytes() == 0);
  device_buffer b;
  CHECK(device_buffer::allocate(backend::cpu, 1000, &b).ok());
  CHECK(b.size_bytes() == 1000);
  CHECK(b.where() == backend::cpu);
  CHECK(reinterpret_cast<std::uintptr_t>(b.data()) % 64 == 0);
  const std::string text = "weighted accumulate";
  CHECK(b.upload(text.data(), text.size(), 900).ok());
  std::string back(text.size(), '?');
  CHECK(b.download(back.data(), back.size(), 900).ok());
  CHECK(back == text);
  const status outside = b.upload(text.data(), text.size(), 990);
  CHECK(!outside.ok());
  CHECK_MSG(contains(outside.message(), "outside the buffer of 1000 bytes"), outside.message());
  CHECK(!b.download(back.data(), 1, 1001).ok());
  CHECK(b.fill_bytes(0xab).ok());
  CHECK(static_cast<unsigned char*>(b.data())[999] == 0xab);
  device_buffer moved = std::move(b);
  CHECK(moved.size_bytes() == 1000);
  CHECK(b.data() == nullptr);  // NOLINT(bugprone-use-after-move): documented empty state
  CHECK(b.size_bytes() == 0);
}

TEST_CASE("device_buffer: cuda memory without a device is refused") {
  int devices = 0;
  (void)gpu::device_count(&devices);
  if (devices > 0) return;
  device_buffer b;
  const status st = device_buffer::allocate(backend::cuda, 64, &b);
  CHECK(!st.ok());
  CHECK(b.data() == nullptr);
  CHECK(!st.message().empty());
}

TEST_CASE("backend selection: preference parsing and the decision") {
  backend_preference p = backend_preference::cpu;
  CHECK(parse_backend_preference("auto", &p).ok() && p == backend_preference::automatic);
  CHECK(parse_backend_preference("cpu", &p).ok() && p == backend_preference::cpu);
  CHECK(parse_backend_preference("cuda", &p).ok() && p == backend_preference::cuda);
  const status bad = parse_backend_preference("gpu", &p);
  CHECK(!bad.ok());
  CHECK(p == backend_preference::automatic);
  CHECK_MSG(contains(bad.message(), "auto, cpu, cuda"), bad.message());
  CHECK(choose_backend(backend_preference::automatic, 0) == backend::cpu);
  CHECK(choose_backend(backend_preference::automatic, 2) == backend::cuda);
  CHECK(choose_backend(backend_preference::cpu, 2) == backend::cpu);
  CHECK(choose_backend(backend_preference::cuda, 1) == backend::cuda);
  CHECK(choose_backend(backend_preference::cuda, 0) == backend::cpu);
  CHECK(std::string(to_string(backend::cuda)) == "cuda");
}

TEST_CASE("probe and device_info agree with the build and the machine") {
  const cuda_probe p = probe_cuda();
  CHECK(p.compiled == gpu::compiled());
  CHECK(p.nccl_linked == nccl_compiled());
  CHECK(static_cast<int>(p.devices.size()) == p.device_count);
  CHECK(p.device_count > 0 || !p.device_error.empty());
  if (p.compiled) CHECK(p.runtime_version >= 11000);
  if (p.nccl_linked) CHECK_MSG(p.nccl_version >= 20000, std::to_string(p.nccl_version));
  const backend chosen = default_backend();
  CHECK(chosen == backend::cpu || p.device_count > 0);
  const std::string info = device_info();
  std::printf("%s", info.c_str());
  CHECK(contains(info, "cuda compiled: " + std::string(p.compiled ? "yes" : "no")));
  CHECK(contains(info, "backend: " + std::string(to_string(chosen))));
  CHECK(contains(info, "cuda devices: " + std::to_string(p.device_count)));
}

TEST_CASE("nccl: version without a GPU, or a clear refusal without NCCL") {
  int version = -1;
  const status st = nccl_version(&version);
  if (nccl_compiled()) {
    CHECK_MSG(st.ok(), st.message());
    CHECK_MSG(version >= 20000, std::to_string(version));
  } else {
    CHECK(!st.ok());
    CHECK(version == 0);
    std::unique_ptr<nccl_clique> clique;
    CHECK(!nccl_clique::create({0}, &clique).ok());
    CHECK(clique == nullptr);
  }
}
