#pragma once
/// The Noise protocol framework's XX handshake, Noise_XX_25519_AESGCM_SHA256
/// (noiseprotocol.org, revision 34), on OpenSSL 3, with libp2p's identity proof: each
/// side's handshake payload carries its Ed25519 identity key and a signature of its
/// static Noise key, so a completed handshake proves the other side's PeerID.
///
///   -> e
///   <- e, ee, s, es      payload: responder's identity
///   -> s, se             payload: initiator's identity
///
/// Pure: no I/O. Messages are byte strings handed to and taken from the caller.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "messages/identity/ed25519.hpp"
#include "messages/identity/peer_id.hpp"
#include "messages/result.hpp"

namespace apiary::messages::noise {

/// The protocol name, which is also the initial handshake hash.
inline constexpr std::string_view k_protocol = "Noise_XX_25519_AESGCM_SHA256";
/// Bytes of an AEAD tag.
inline constexpr std::size_t k_tag_bytes = 16;
/// Bytes of an X25519 public key.
inline constexpr std::size_t k_dh_bytes = 32;
/// Largest handshake message accepted (Noise's 65535-byte limit).
inline constexpr std::size_t k_max_message_bytes = 65535;
/// What the identity signature covers, before the static key (libp2p's prefix).
inline constexpr std::string_view k_static_key_prefix = "noise-libp2p-static-key:";

/// One direction's AES-256-GCM key and nonce counter (Noise's CipherState). Nonces are
/// implicit: the n-th message of a direction uses nonce n, so a replayed, reordered,
/// dropped or forged message fails authentication. Move-only.
class CipherState {
 public:
  CipherState();
  ~CipherState();
  CipherState(CipherState&&) noexcept;
  CipherState& operator=(CipherState&&) noexcept;
  CipherState(const CipherState&) = delete;
  CipherState& operator=(const CipherState&) = delete;

  /// Sets the 32-byte key and nonce 0.
  void initialize_key(std::string_view key);
  [[nodiscard]] bool has_key() const { return has_key_; }
  /// The nonce the next message takes.
  [[nodiscard]] std::uint64_t nonce() const { return n_; }

  /// Encrypts `size` bytes from `in` to `out` (they may be the same) with associated data
  /// `ad` under the next nonce, writing the tag to `tag` (k_tag_bytes). Errors: errc::crypto
  /// (OpenSSL failed, or the nonces are exhausted).
  Status seal(std::string_view ad, const std::byte* in, std::size_t size, std::byte* out, std::byte* tag);
  /// Decrypts `size` bytes from `in` to `out` (they may be the same) under the next nonce,
  /// checking `tag`. Errors: errc::crypto when the message is not authentic (forged,
  /// replayed, reordered or truncated); the nonce then does not advance.
  Status open(std::string_view ad, const std::byte* in, std::size_t size, std::byte* out, const std::byte* tag);

  /// The next `count` nonces, taken now for messages sealed or opened later, or out of
  /// order, with seal_at / open_at (a frame's payload, whose tag its envelope carries).
  /// Errors: errc::crypto when the nonces are exhausted.
  Result<std::uint64_t> reserve(std::uint64_t count);
  /// seal() under nonce `n`, which reserve() handed out; the counter does not move.
  Status seal_at(std::uint64_t n, std::string_view ad, const std::byte* in, std::size_t size, std::byte* out,
                 std::byte* tag);
  /// open() under nonce `n`, which reserve() handed out; the counter does not move.
  Status open_at(std::uint64_t n, std::string_view ad, const std::byte* in, std::size_t size, std::byte* out,
                 const std::byte* tag);

  /// A CipherState with the same key and counter but its own OpenSSL context: for
  /// seal_at / open_at of reserved nonces on another thread (one state is one thread's).
  [[nodiscard]] CipherState fork() const;

  /// Noise's EncryptWithAd: ciphertext ‖ tag, or the plaintext itself when no key is set.
  Result<std::string> encrypt_with_ad(std::string_view ad, std::string_view plaintext);
  /// Noise's DecryptWithAd (the inverse).
  Result<std::string> decrypt_with_ad(std::string_view ad, std::string_view ciphertext);

 private:
  /// AES-256-GCM over `in` under nonce `n` with `ad`, up to (not including) the tag.
  Status crypt(std::uint64_t n, std::string_view ad, const std::byte* in, std::size_t size, std::byte* out,
               bool encrypt);

  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
  bool has_key_ = false;
  std::uint64_t n_ = 0;
};

/// Noise's XX pattern alone (HandshakeState for XX, revision 34 §5): any prologue and
/// payloads, given or fresh X25519 keys. Handshake below is it with libp2p's identity
/// payloads and an empty prologue; tests check it against the Noise test vectors.
class XxHandshake {
 public:
  /// One side of an XX handshake; `static_private` and `ephemeral_private` are 32-byte
  /// X25519 private keys, or empty for fresh ones. Errors: errc::crypto.
  static Result<XxHandshake> create(bool initiator, std::string_view prologue, std::string_view static_private = {},
                                    std::string_view ephemeral_private = {});
  ~XxHandshake();
  XxHandshake(XxHandshake&&) noexcept;
  XxHandshake& operator=(XxHandshake&&) noexcept;

  /// The next message this side sends, carrying `payload` (in clear in the first message,
  /// as Noise has no key yet). Errors: errc::protocol when it is not this side's turn,
  /// errc::crypto.
  Result<std::string> write_message(std::string_view payload);
  /// The payload of the other side's next message. Errors: errc::protocol (not its turn),
  /// errc::malformed (shorter than its keys, or over 65535 bytes), errc::crypto (failed
  /// authentication, a bad key); each names the message.
  Result<std::string> read_message(std::string_view message);
  /// True once all three messages were written or read.
  [[nodiscard]] bool done() const;
  /// Whether it is this side's turn to write.
  [[nodiscard]] bool my_turn() const;
  /// Messages written or read so far (0 to 3).
  [[nodiscard]] int step() const;
  /// The handshake hash h (channel binding).
  [[nodiscard]] const std::string& handshake_hash() const;
  /// This side's static public key, and the other side's once it came (32 bytes).
  [[nodiscard]] const std::string& local_static() const;
  [[nodiscard]] const std::string& remote_static() const;
  /// The transport ciphers, (send, receive), from Split(). Errors: errc::protocol before
  /// done().
  Result<std::pair<CipherState, CipherState>> split();

 private:
  struct State;
  explicit XxHandshake(std::unique_ptr<State> s);
  std::unique_ptr<State> s_;
};

/// The two directions of a finished handshake.
struct Session {
  CipherState send;
  CipherState recv;
  PeerId remote;                  ///< the other side's proven PeerID
  std::string remote_listen_addr; ///< what it says it listens on (not proven)
  std::string local_static;       ///< this side's static X25519 public key (what identity proofs sign)
  std::string remote_static;      ///< the other side's
};

/// One side of an XX handshake. Call write/read in the pattern's order: an initiator
/// writes, reads, writes; a responder reads, writes, reads. Then finish().
class Handshake {
 public:
  /// A handshake for `identity` (signs the static key), announcing `listen_addr`.
  /// `initiator` is the side that dials. Errors: errc::crypto.
  static Result<Handshake> create(bool initiator, const Ed25519PrivateKey& identity, std::string listen_addr);
  /// As create(), with the ephemeral and static X25519 keys given as 32-byte private keys
  /// (tests with fixed keys). A non-empty `signed_static` is the public key the identity
  /// signature covers instead of this side's own (tests of a forged binding).
  static Result<Handshake> create_with_keys(bool initiator, const Ed25519PrivateKey& identity,
                                            std::string listen_addr, std::string_view static_private,
                                            std::string_view ephemeral_private,
                                            std::string_view signed_static = {});
  ~Handshake();
  Handshake(Handshake&&) noexcept;
  Handshake& operator=(Handshake&&) noexcept;

  /// The next message this side sends. Errors: errc::protocol when it is not this side's
  /// turn, errc::crypto.
  Result<std::string> write_message();
  /// Takes the other side's next message. Errors: errc::protocol (not its turn),
  /// errc::malformed (wrong size, bad payload), errc::crypto (failed authentication, a
  /// bad key or a signature that does not prove the identity).
  Status read_message(std::string_view message);
  /// True once all three messages were written or read.
  [[nodiscard]] bool done() const;
  /// Whether it is this side's turn to write.
  [[nodiscard]] bool my_turn() const;
  /// The session: this side's send and receive ciphers and the peer's identity.
  /// Errors: errc::protocol before done().
  Result<Session> finish();
  /// The handshake hash (channel binding), for tests.
  [[nodiscard]] std::string handshake_hash() const;

 private:
  struct State;
  explicit Handshake(std::unique_ptr<State> s);
  std::unique_ptr<State> s_;
};

}  // namespace apiary::messages::noise
