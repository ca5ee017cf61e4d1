// The device actors (actors/device/): every operation against a plain loop, many
// requests in flight at once, bad input answered with an error while the actor keeps
// serving; the context (CUDA) actor against the CPU one; the NCCL id over the RPC.
#include <catch2/catch.hpp>

#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "actors/device/device_actor.hpp"
#include "actors/device/nccl_bootstrap.hpp"
#include "actors/rpc.hpp"
#include "cuda/buffer.hpp"
#include "cuda/nccl.hpp"
#include "cuda/device.hpp"
#include "cuda/runtime.hpp"
#include "messages/tensor/codec.hpp"
#include "messages/tensor/compressors.hpp"

using namespace apiary;
using namespace apiary::actors;

namespace {

Buffer buf(const std::vector<float>& v) { return Buffer::copy_of(v.data(), v.size() * sizeof(float)); }

std::vector<float> vals(const Buffer& b) {
  std::vector<float> v(b.size() / sizeof(float));
  if (!v.empty()) std::memcpy(v.data(), b.data(), b.size());
  return v;
}

/// n values with a spread of magnitudes and signs, different for each `seed`.
std::vector<float> ramp(std::size_t n, float seed) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = seed * 0.37f + static_cast<float>(i % 97) * 0.013f - 0.5f;
  return v;
}

messages::Tensor tensor(const std::vector<float>& v) {
  auto t = messages::Tensor::copy_of(messages::dtype::float32, {static_cast<std::uint32_t>(v.size())}, v.data(),
                                     v.size() * sizeof(float));
  REQUIRE(t.ok());
  return *t;
}

/// Sends `req` and waits for the reply of type R.
template <class R, class Req>
R ask(caf::scoped_actor& self, const device_actor& dev, Req req) {
  std::optional<R> out;
  self->request(dev, caf::infinite, std::move(req))
      .receive([&](R& r) { out = std::move(r); },
               [&](caf::error& e) { FAIL("device actor failed: " << self->system().render(e)); });
  REQUIRE(out.has_value());
  return std::move(*out);
}

struct fixture {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  device_actor dev = spawn_cpu_device_actor(sys);
  caf::scoped_actor self{sys};
  ~fixture() { self->send_exit(dev, caf::exit_reason::user_shutdown); }
};

}  // namespace

TEST_CASE_METHOD(fixture, "device actor: each operation equals a plain loop", "[actor]") {
  const std::size_t n = 1000;
  const auto a = ramp(n, 1.0f), b = ramp(n, -2.0f);

  auto acc = ask<Result<Buffer>>(self, dev, accumulate_request{buf(a), buf(b), 0.25f});
  REQUIRE(acc.ok());
  auto sum = ask<Result<Buffer>>(self, dev, average_request{buf(a), 3});
  REQUIRE(sum.ok());
  auto del = ask<Result<Buffer>>(self, dev, delta_request{buf(a), buf(b)});
  REQUIRE(del.ok());
  const auto acc_v = vals(*acc), avg_v = vals(*sum), del_v = vals(*del);
  REQUIRE(acc_v.size() == n);
  REQUIRE(avg_v.size() == n);
  REQUIRE(del_v.size() == n);
  for (std::size_t i = 0; i < n; ++i) {
    const float w_b = 0.25f * b[i];  // rounded separately: no fused multiply-add
    CHECK(acc_v[i] == a[i] + w_b);
    CHECK(avg_v[i] == a[i] / 3.0f);
    CHECK(del_v[i] == a[i] - b[i]);
  }
  CHECK(vals(buf(a)) == a);  // inputs untouched

  for (auto codec : {pb::CompressionType::NONE, pb::CompressionType::FLOAT16, pb::CompressionType::MEANSTD_16BIT,
                     pb::CompressionType::UNIFORM_8BIT, pb::CompressionType::QUANTILE_8BIT,
                     pb::CompressionType::BLOCKWISE_8BIT}) {
    INFO(messages::compression_name(codec));
    auto wire = ask<Result<pb::Tensor>>(self, dev, encode_request{tensor(a), codec});
    REQUIRE(wire.ok());
    auto direct = messages::encode(tensor(a), codec);
    REQUIRE(direct.ok());
    CHECK(wire->SerializeAsString() == direct->SerializeAsString());
    auto back = ask<Result<messages::Tensor>>(self, dev, decode_request{*wire});
    REQUIRE(back.ok());
    auto direct_back = messages::decode(*direct);
    REQUIRE(direct_back.ok());
    CHECK(*back == *direct_back);
  }

  // Error feedback: the actor's residuals behave as a HorovodCompressorEF of its own.
  messages::HorovodCompressorEF ef;
  for (int step = 0; step < 5; ++step) {
    auto sent = ask<Result<messages::Tensor>>(self, dev, ef_compress_request{"w", tensor(a)});
    REQUIRE(sent.ok());
    auto expected = ef.compress("w", tensor(a));
    REQUIRE(expected.ok());
    CHECK(*sent == *expected);
  }
  CHECK(ask<bool>(self, dev, ef_reset_request{"w"}));
  CHECK_FALSE(ask<bool>(self, dev, ef_reset_request{"w"}));
  ef.reset();
  auto first = ask<Result<messages::Tensor>>(self, dev, ef_compress_request{"w", tensor(a)});
  REQUIRE(first.ok());
  CHECK(*first == *ef.compress("w", tensor(a)));
}

TEST_CASE_METHOD(fixture, "device actor: many requests in flight", "[actor]") {
  const std::size_t n = 4096;
  const int in_flight = 64;
  std::vector<std::vector<float>> xs;
  std::vector<decltype(self->request(dev, caf::infinite, accumulate_request{}))> handles;
  const auto base = ramp(n, 0.5f);
  for (int k = 0; k < in_flight; ++k) {
    xs.push_back(ramp(n, static_cast<float>(k)));
    handles.push_back(self->request(dev, caf::infinite, accumulate_request{buf(base), buf(xs.back()), 0.5f}));
  }
  // Every request was sent before any reply is read; each reply matches its request.
  for (int k = 0; k < in_flight; ++k) {
    std::vector<float> got;
    handles[k].receive([&](Result<Buffer>& r) { if (r.ok()) got = vals(*r); },
                       [&](caf::error& e) { FAIL(self->system().render(e)); });
    REQUIRE(got.size() == n);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) wrong += got[i] != base[i] + 0.5f * xs[k][i];
    CHECK(wrong == 0);
  }
}

TEST_CASE_METHOD(fixture, "device actor: bad input gives a clear error and the actor survives", "[actor]") {
  auto mismatch = ask<Result<Buffer>>(self, dev, accumulate_request{buf({1, 2, 3}), buf({1, 2}), 1.0f});
  REQUIRE_FALSE(mismatch.ok());
  CHECK(mismatch.error().code == errc::invalid_argument);
  CHECK(mismatch.error().message.find("same length") != std::string::npos);

  auto odd = ask<Result<Buffer>>(self, dev, delta_request{Buffer::copy_of("abcde"), Buffer::copy_of("abcde")});
  REQUIRE_FALSE(odd.ok());
  CHECK(odd.error().message.find("float32") != std::string::npos);

  auto zero = ask<Result<Buffer>>(self, dev, average_request{buf({1, 2}), 0});
  REQUIRE_FALSE(zero.ok());
  CHECK(zero.error().code == errc::invalid_argument);

  auto ints = messages::Tensor::zeros(messages::dtype::int32, {4});
  REQUIRE(ints.ok());
  auto wrong_dtype = ask<Result<messages::Tensor>>(self, dev, ef_compress_request{"i", *ints});
  REQUIRE_FALSE(wrong_dtype.ok());
  CHECK(wrong_dtype.error().code == errc::unsupported);
  auto wrong_codec = ask<Result<pb::Tensor>>(self, dev, encode_request{*ints, pb::CompressionType::FLOAT16});
  REQUIRE_FALSE(wrong_codec.ok());
  CHECK(wrong_codec.error().code == errc::unsupported);
  pb::Tensor garbage;
  garbage.set_dtype("float32");
  garbage.add_size(4);
  garbage.set_buffer("xyz");
  auto bad_wire = ask<Result<messages::Tensor>>(self, dev, decode_request{garbage});
  REQUIRE_FALSE(bad_wire.ok());
  CHECK(bad_wire.error().code == errc::malformed);

  // Still serving.
  auto fine = ask<Result<Buffer>>(self, dev, delta_request{buf({5, 7}), buf({2, 3})});
  REQUIRE(fine.ok());
  CHECK(vals(*fine) == std::vector<float>{3, 4});
}

namespace {

/// The replies of `dev` to one request of each element-wise kind and an fp16 encode, on
/// the same inputs, as float vectors (or the encoded bytes).
struct replies {
  std::vector<float> acc, avg, del;
  std::string encoded;
  std::vector<float> reduced;  ///< a part reduction's average, then each delta
};

/// A part reduction of three contributors of n values with unequal weights.
reduce_part_request reduce_request_of(std::size_t n) {
  return reduce_part_request{core::averaging::ReduceJob{9, {ramp(n, 3.0f), ramp(n, -1.5f), ramp(n, 0.25f)},
                                                        {0.5f, 2.0f, 1.25f}}};
}

replies run_each(caf::scoped_actor& self, const device_actor& dev) {
  const std::size_t n = 4099;
  const auto a = ramp(n, 3.0f), b = ramp(n, -1.5f);
  replies out;
  auto acc = ask<Result<Buffer>>(self, dev, accumulate_request{buf(a), buf(b), 0.3f});
  auto avg = ask<Result<Buffer>>(self, dev, average_request{buf(a), 7});
  auto del = ask<Result<Buffer>>(self, dev, delta_request{buf(a), buf(b)});
  auto enc = ask<Result<pb::Tensor>>(self, dev, encode_request{tensor(a), pb::BLOCKWISE_8BIT});
  REQUIRE(acc.ok());
  REQUIRE(avg.ok());
  REQUIRE(del.ok());
  REQUIRE(enc.ok());
  out.acc = vals(*acc);
  out.avg = vals(*avg);
  out.del = vals(*del);
  out.encoded = enc->buffer();
  auto red = ask<Result<core::averaging::ReducedPart>>(self, dev, reduce_request_of(n));
  REQUIRE(red.ok());
  out.reduced = red->average;
  for (const auto& d : red->deltas) out.reduced.insert(out.reduced.end(), d.begin(), d.end());
  return out;
}

void require_same(const replies& got, const replies& want) {
  CHECK(std::memcmp(got.acc.data(), want.acc.data(), want.acc.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(got.avg.data(), want.avg.data(), want.avg.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(got.del.data(), want.del.data(), want.del.size() * sizeof(float)) == 0);
  CHECK(got.encoded == want.encoded);
  REQUIRE(got.reduced.size() == want.reduced.size());
  CHECK(std::memcmp(got.reduced.data(), want.reduced.data(), want.reduced.size() * sizeof(float)) == 0);
}

}  // namespace

TEST_CASE_METHOD(fixture, "context device actor on the CPU backend: the CPU actor's replies, bit for bit",
                 "[actor]") {
  auto ctx_dev = spawn_backend_device_actor(sys, cuda::backend::cpu, 0);
  REQUIRE(ctx_dev.ok());
  require_same(run_each(self, *ctx_dev), run_each(self, dev));
  // Bad input: the same clear errors, and the actor keeps serving.
  auto bad = ask<Result<Buffer>>(self, *ctx_dev, delta_request{buf({1.0f}), buf({1.0f, 2.0f})});
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().code == errc::invalid_argument);
  auto zero = ask<Result<Buffer>>(self, *ctx_dev, average_request{buf({1.0f}), 0});
  REQUIRE_FALSE(zero.ok());
  CHECK(zero.error().code == errc::invalid_argument);
  CHECK(ask<Result<Buffer>>(self, *ctx_dev, average_request{buf({6.0f}), 3}).ok());
  self->send_exit(*ctx_dev, caf::exit_reason::user_shutdown);
}

namespace {

/// add_scaled then read on `memory` (in `dev`'s memory): memory += 0.5 * x, read back.
std::vector<float> update_and_read(caf::scoped_actor& self, const device_actor& dev, float* memory,
                                   const std::vector<float>& x) {
  auto st = ask<Status>(self, dev, add_scaled_request{memory, x, 0.5f});
  REQUIRE(st.ok());
  auto back = ask<Result<std::vector<float>>>(self, dev, read_request{memory, x.size()});
  REQUIRE(back.ok());
  return *back;
}

}  // namespace

TEST_CASE_METHOD(fixture, "device actors read and update tensors in their own memory", "[actor]") {
  auto ctx_dev = spawn_backend_device_actor(sys, cuda::backend::cpu, 0);
  REQUIRE(ctx_dev.ok());
  const auto x = ramp(1000, 2.0f);
  std::vector<float> a = ramp(1000, 1.0f), b = a, want = a;
  for (std::size_t k = 0; k < want.size(); ++k) want[k] = want[k] + 0.5f * x[k];
  CHECK(update_and_read(self, dev, a.data(), x) == want);
  CHECK(update_and_read(self, *ctx_dev, b.data(), x) == want);
  CHECK(a == want);  // in place
  auto null = ask<Result<std::vector<float>>>(self, dev, read_request{nullptr, 3});
  CHECK(null.error().code == errc::invalid_argument);
  CHECK(ask<Status>(self, *ctx_dev, add_scaled_request{nullptr, {1.0f}, 1.0f}).error().code ==
        errc::invalid_argument);
  self->send_exit(*ctx_dev, caf::exit_reason::user_shutdown);
}

TEST_CASE_METHOD(fixture, "spawn_device_actor picks a backend that works", "[actor]") {
  const device_actor chosen = spawn_device_actor(sys);
  require_same(run_each(self, chosen), run_each(self, dev));
  self->send_exit(chosen, caf::exit_reason::user_shutdown);
}

TEST_CASE_METHOD(fixture, "CUDA device actor: the CPU actor's replies, bit for bit (gpu, skipped without one)",
                 "[actor][gpu]") {
  if (cuda::default_backend() != cuda::backend::cuda) {
    WARN("skipped: no usable CUDA device (" << cuda::device_info() << ")");
    auto refused = spawn_cuda_device_actor(sys, 0);
    if (!cuda::gpu::compiled()) CHECK_FALSE(refused.ok());
    return;
  }
  auto gpu_dev = spawn_cuda_device_actor(sys, 0);
  REQUIRE(gpu_dev.ok());
  require_same(run_each(self, *gpu_dev), run_each(self, dev));
  // A tensor in GPU memory, updated and read through the CUDA actor, as on the host.
  const auto x = ramp(4097, 2.0f);
  std::vector<float> host = ramp(4097, 1.0f);
  cuda::device_buffer mem;
  REQUIRE(cuda::device_buffer::allocate(cuda::backend::cuda, host.size() * sizeof(float), &mem).ok());
  REQUIRE(mem.upload(host.data(), host.size() * sizeof(float)).ok());
  const auto on_gpu = update_and_read(self, *gpu_dev, mem.as<float>(), x);
  CHECK(on_gpu == update_and_read(self, dev, host.data(), x));
  self->send_exit(*gpu_dev, caf::exit_reason::user_shutdown);
}

TEST_CASE("the NCCL unique id travels over the RPC: served by the root, fetched by a rank", "[actor]") {
  using namespace std::chrono_literals;
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  actors::GatewayConfig gc;
  gc.backend = actors::Backend::local;
  auto root = actors::Gateway::start(sys, gc);
  auto rank = actors::Gateway::start(sys, gc);
  REQUIRE(root.ok());
  REQUIRE(rank.ok());
  cuda::nccl_id id;
  for (std::size_t i = 0; i < id.bytes.size(); ++i) id.bytes[i] = static_cast<std::uint8_t>(i * 7 + 3);
  auto server = serve_nccl_id(sys, *root, "grad-sync", id);
  caf::scoped_actor self{sys};
  auto got = fetch_nccl_id(self, **rank, (*root)->address(), "grad-sync", 5s);
  for (int attempt = 0; attempt < 50 && !got.ok() && got.error().code == errc::not_found; ++attempt) {
    std::this_thread::sleep_for(20ms);  // the registration is asynchronous
    got = fetch_nccl_id(self, **rank, (*root)->address(), "grad-sync", 5s);
  }
  REQUIRE(got.ok());
  CHECK(got->bytes == id.bytes);
  // Another group is not served there: a clear not_found naming the handle.
  auto other = fetch_nccl_id(self, **rank, (*root)->address(), "other", 5s);
  REQUIRE_FALSE(other.ok());
  CHECK(other.error().code == errc::not_found);
  CHECK_THAT(other.error().message, Catch::Contains("nccl.id/other"));
  // Something else under a group's handle: the size is checked.
  auto wrong = serve_unary(sys, *root, nccl_id_handle("short"),
                           [](const Delivery&) -> Result<Buffer> { return Buffer::copy_of("abc"); });
  auto bad = fetch_nccl_id(self, **rank, (*root)->address(), "short", 5s);
  for (int attempt = 0; attempt < 50 && !bad.ok() && bad.error().code == errc::not_found; ++attempt) {
    std::this_thread::sleep_for(20ms);
    bad = fetch_nccl_id(self, **rank, (*root)->address(), "short", 5s);
  }
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().code == errc::malformed);
  self->send_exit(server, caf::exit_reason::user_shutdown);
  self->send_exit(wrong, caf::exit_reason::user_shutdown);
  (*root)->stop();
  (*rank)->stop();
}

TEST_CASE("NCCL over the RPC on GPUs: a one-rank group forms and all-reduces (gpu, skipped without one)",
          "[actor][gpu]") {
  if (cuda::default_backend() != cuda::backend::cuda || !cuda::nccl_compiled()) {
    WARN("skipped: no usable CUDA device or no NCCL in this build");
    return;
  }
  cuda::nccl_id id;
  REQUIRE(cuda::nccl_new_id(&id).ok());
  std::unique_ptr<cuda::nccl_communicator> comm;
  const cuda::status st = cuda::nccl_communicator::create(id, 1, 0, 0, &comm);
  INFO(st.message());
  REQUIRE(st.ok());
  cuda::device_buffer b;
  REQUIRE(cuda::device_buffer::allocate(cuda::backend::cuda, 4 * sizeof(float), &b).ok());
  const float v[4] = {1, 2, 3, 4};
  REQUIRE(b.upload(v, sizeof v).ok());
  REQUIRE(comm->all_reduce(b.as<float>(), b.as<float>(), 4).ok());
  float back[4] = {};
  REQUIRE(b.download(back, sizeof back).ok());
  CHECK(std::memcmp(back, v, sizeof v) == 0);
}

TEST_CASE_METHOD(fixture, "device actor: a part reduction is the weighted mean and each input's delta",
                 "[actor]") {
  const std::size_t n = 1000;
  const auto request = reduce_request_of(n);
  const auto& job = request.job;
  auto red = ask<Result<core::averaging::ReducedPart>>(self, dev, request);
  REQUIRE(red.ok());
  REQUIRE(red->deltas.size() == 3);
  for (std::size_t k = 0; k < n; ++k) {
    double acc = 0, den = 0;
    for (std::size_t i = 0; i < 3; ++i) {
      acc += double{job.weights[i]} * job.inputs[i][k];
      den += job.weights[i];
    }
    REQUIRE(red->average[k] == Approx(acc / den).margin(1e-6));
    for (std::size_t i = 0; i < 3; ++i) REQUIRE(red->deltas[i][k] == red->average[k] - job.inputs[i][k]);
  }
  // Bad jobs: a clear error, and the actor keeps serving.
  auto bad = ask<Result<core::averaging::ReducedPart>>(
      self, dev, reduce_part_request{core::averaging::ReduceJob{1, {{1.0f}, {1.0f, 2.0f}}, {1.0f, 1.0f}}});
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().code == errc::invalid_argument);
  auto zero = ask<Result<core::averaging::ReducedPart>>(
      self, dev, reduce_part_request{core::averaging::ReduceJob{2, {{1.0f}}, {0.0f}}});
  CHECK(zero.error().code == errc::invalid_argument);
  CHECK(ask<Result<core::averaging::ReducedPart>>(self, dev, reduce_request_of(5)).ok());
}
