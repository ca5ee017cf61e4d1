// libFuzzer target: the Noise XX handshake and sealed frames as the other side of a
// connection sends them (fixed keys, noise_fixture.hpp), by the input's first byte:
//   0: a responder reads message 1, writes message 2, reads message 3;
//   1: an initiator writes message 1, reads message 2, writes message 3;
//   then (both) the session opens sealed messages from the input, in order.
// Nothing may crash or leak; a handshake that reads its messages must finish, and a
// sealed message that opens must open to bytes that seal back to the same ciphertext.
// A message 1 whose key is a low-order point is refused when message 2 is written
// (regressions/fuzz_noise/low_order_ephemeral).
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_input.hpp"
#include "fuzz/noise_fixture.hpp"

namespace noise = apiary::messages::noise;

namespace {

void open_frames(noise::Session& session, apiary::fuzz::FuzzInput& in) {
  // The peer's direction, as the peer would seal it, to check what opens.
  noise::CipherState mirror = session.recv.fork();
  for (int i = 0; i < 8 && !in.empty(); ++i) {
    const std::string sealed = in.bytes();
    auto plain = session.recv.decrypt_with_ad({}, sealed);
    if (!plain) continue;  // the nonce does not move: the next one is tried on the same nonce
    auto again = mirror.encrypt_with_ad({}, *plain);
    if (!again || *again != sealed) __builtin_trap();
    mirror = session.recv.fork();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  apiary::fuzz::FuzzInput in(data, size);
  const bool responder = in.pick(2) == 0;
  auto hs = apiary::fuzz::fixed_side(!responder);
  if (responder) {
    if (!hs.read_message(in.bytes())) return 0;
    // Message 2 follows, unless message 1's key is a low-order point (X25519 refuses it).
    if (auto m2 = hs.write_message(); !m2) {
      if (m2.error().code != apiary::errc::crypto) __builtin_trap();
      return 0;
    }
    if (!hs.read_message(in.bytes())) return 0;
  } else {
    if (!hs.write_message()) __builtin_trap();
    if (!hs.read_message(in.bytes())) return 0;
    if (!hs.write_message()) __builtin_trap();
  }
  if (!hs.done()) __builtin_trap();
  auto session = hs.finish();
  if (!session) __builtin_trap();
  open_frames(*session, in);
  return 0;
}
