#pragma once
/// The fixed keys of fuzz_noise and its seeds (make_seeds.cpp): with them a handshake is
/// deterministic, so a seed's message 2, message 3 and sealed frames stay valid input.
#include <cstdlib>
#include <string>

#include "messages/identity/noise.hpp"

namespace apiary::fuzz {

/// One side of the fixed handshake: the initiator (identity seed 01..., static 11...,
/// ephemeral 12...) or the responder (02..., 21..., 22...).
inline messages::noise::Handshake fixed_side(bool initiator) {
  const char id = initiator ? '\x01' : '\x02';
  auto key = messages::Ed25519PrivateKey::from_seed(std::string(32, id));
  if (!key) std::abort();
  auto hs = messages::noise::Handshake::create_with_keys(initiator, *key, initiator ? "127.0.0.1:1" : "127.0.0.1:2",
                                                          std::string(32, initiator ? '\x11' : '\x21'),
                                                          std::string(32, initiator ? '\x12' : '\x22'));
  if (!hs) std::abort();
  return std::move(*hs);
}

/// The three messages of the fixed handshake.
struct FixedTranscript {
  std::string m1, m2, m3;
};

inline FixedTranscript fixed_transcript() {
  auto a = fixed_side(true);
  auto b = fixed_side(false);
  FixedTranscript t;
  auto m1 = a.write_message();
  if (!m1 || !b.read_message(*m1)) std::abort();
  auto m2 = b.write_message();
  if (!m2 || !a.read_message(*m2)) std::abort();
  auto m3 = a.write_message();
  if (!m3 || !b.read_message(*m3)) std::abort();
  t.m1 = *m1;
  t.m2 = *m2;
  t.m3 = *m3;
  return t;
}

}  // namespace apiary::fuzz
