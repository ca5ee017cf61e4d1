#include "messages/identity/noise.hpp"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <climits>
#include <cstring>

#include "messages/identity/key_proto.hpp"
#include "noise.pb.h"

namespace apiary::messages::noise {
namespace {

using PkeyPtr = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;
using PkeyCtxPtr = std::unique_ptr<EVP_PKEY_CTX, decltype(&EVP_PKEY_CTX_free)>;

constexpr std::size_t k_hash_bytes = 32;
constexpr std::size_t k_key_bytes = 32;

const unsigned char* u8(const void* p) { return static_cast<const unsigned char*>(p); }
unsigned char* u8(void* p) { return static_cast<unsigned char*>(p); }

std::string sha256(std::string_view a, std::string_view b = {}) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  const bool ok = ctx != nullptr && EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) == 1 &&
                  EVP_DigestUpdate(ctx, a.data(), a.size()) == 1 && EVP_DigestUpdate(ctx, b.data(), b.size()) == 1 &&
                  EVP_DigestFinal_ex(ctx, out, &len) == 1;
  EVP_MD_CTX_free(ctx);
  return ok ? std::string(reinterpret_cast<char*>(out), len) : std::string(k_hash_bytes, '\0');
}

std::string hmac(std::string_view key, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), u8(data.data()), data.size(), out, &len) ==
      nullptr) {
    return std::string(k_hash_bytes, '\0');
  }
  return std::string(reinterpret_cast<char*>(out), len);
}

/// Noise's HKDF with two outputs.
std::pair<std::string, std::string> hkdf2(std::string_view ck, std::string_view ikm) {
  const std::string temp = hmac(ck, ikm);
  std::string out1 = hmac(temp, std::string_view("\x01", 1));
  std::string out2 = hmac(temp, out1 + '\x02');
  return {std::move(out1), std::move(out2)};
}

Error openssl_error(const char* what) { return make_error(errc::crypto, "noise: {} failed in OpenSSL", what); }

Result<PkeyPtr> x25519_generate() {
  PkeyCtxPtr ctx(EVP_PKEY_CTX_new_id(EVP_PKEY_X25519, nullptr), &EVP_PKEY_CTX_free);
  EVP_PKEY* key = nullptr;
  if (!ctx || EVP_PKEY_keygen_init(ctx.get()) != 1 || EVP_PKEY_keygen(ctx.get(), &key) != 1) {
    return openssl_error("X25519 key generation");
  }
  return PkeyPtr(key, &EVP_PKEY_free);
}

Result<PkeyPtr> x25519_from_private(std::string_view raw) {
  if (raw.size() != k_dh_bytes) {
    return make_error(errc::invalid_argument, "noise: an X25519 private key is {} bytes, got {}", k_dh_bytes, raw.size());
  }
  EVP_PKEY* key = EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, nullptr, u8(raw.data()), raw.size());
  if (key == nullptr) return openssl_error("loading an X25519 private key");
  return PkeyPtr(key, &EVP_PKEY_free);
}

std::string x25519_public(EVP_PKEY* key) {
  std::string out(k_dh_bytes, '\0');
  std::size_t len = out.size();
  if (EVP_PKEY_get_raw_public_key(key, u8(out.data()), &len) != 1 || len != k_dh_bytes) return {};
  return out;
}

Result<std::string> x25519_dh(EVP_PKEY* mine, std::string_view theirs) {
  PkeyPtr peer(EVP_PKEY_new_raw_public_key(EVP_PKEY_X25519, nullptr, u8(theirs.data()), theirs.size()),
               &EVP_PKEY_free);
  if (!peer) return make_error(errc::crypto, "noise: the peer's X25519 key is not a valid key");
  PkeyCtxPtr ctx(EVP_PKEY_CTX_new(mine, nullptr), &EVP_PKEY_CTX_free);
  std::string out(k_dh_bytes, '\0');
  std::size_t len = out.size();
  // OpenSSL refuses a shared secret of all zeros (a low-order point from the peer).
  if (!ctx || EVP_PKEY_derive_init(ctx.get()) != 1 || EVP_PKEY_derive_set_peer(ctx.get(), peer.get()) != 1 ||
      EVP_PKEY_derive(ctx.get(), u8(out.data()), &len) != 1 || len != k_dh_bytes) {
    return make_error(errc::crypto, "noise: X25519 with the peer's key failed (a low-order or invalid key)");
  }
  return out;
}

/// The 12-byte AES-GCM nonce of counter n: 4 zero bytes, then n big-endian.
void gcm_nonce(std::uint64_t n, unsigned char iv[12]) {
  std::memset(iv, 0, 4);
  for (int i = 0; i < 8; ++i) iv[4 + i] = static_cast<unsigned char>(n >> (56 - 8 * i));
}

}  // namespace

// ---- CipherState ---------------------------------------------------------------------

struct CipherState::Ctx {
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  unsigned char key[k_key_bytes] = {};
  int mode = 0;  ///< 0: none, 1: encrypting, 2: decrypting (the context's current key schedule)
  ~Ctx() {
    OPENSSL_cleanse(key, sizeof key);
    EVP_CIPHER_CTX_free(ctx);
  }
};

CipherState::CipherState() : ctx_(std::make_unique<Ctx>()) {}
CipherState::~CipherState() = default;
CipherState::CipherState(CipherState&&) noexcept = default;
CipherState& CipherState::operator=(CipherState&&) noexcept = default;

void CipherState::initialize_key(std::string_view key) {
  std::memcpy(ctx_->key, key.data(), std::min(key.size(), k_key_bytes));
  ctx_->mode = 0;
  has_key_ = true;
  n_ = 0;
}

CipherState CipherState::fork() const {
  CipherState c;
  std::memcpy(c.ctx_->key, ctx_->key, k_key_bytes);
  c.has_key_ = has_key_;
  c.n_ = n_;
  return c;
}

Result<std::uint64_t> CipherState::reserve(std::uint64_t count) {
  if (UINT64_MAX - n_ <= count) return make_error(errc::crypto, "noise: the connection's nonces are exhausted");
  const std::uint64_t first = n_;
  n_ += count;
  return first;
}

Status CipherState::seal(std::string_view ad, const std::byte* in, std::size_t size, std::byte* out, std::byte* tag) {
  if (n_ == UINT64_MAX) return make_error(errc::crypto, "noise: the connection's nonces are exhausted");
  auto st = seal_at(n_, ad, in, size, out, tag);
  if (st) ++n_;
  return st;
}

Status CipherState::open(std::string_view ad, const std::byte* in, std::size_t size, std::byte* out,
                         const std::byte* tag) {
  if (n_ == UINT64_MAX) return make_error(errc::crypto, "noise: the connection's nonces are exhausted");
  auto st = open_at(n_, ad, in, size, out, tag);
  if (st) ++n_;
  return st;
}

Status CipherState::crypt(std::uint64_t n, std::string_view ad, const std::byte* in, std::size_t size,
                          std::byte* out, bool encrypt) {
  EVP_CIPHER_CTX* c = ctx_->ctx;
  unsigned char iv[12];
  gcm_nonce(n, iv);
  const int enc = encrypt ? 1 : 0;
  const int mode = encrypt ? 1 : 2;
  // The key schedule is kept while the direction stays; only the nonce changes.
  const bool init = ctx_->mode == mode ? EVP_CipherInit_ex(c, nullptr, nullptr, nullptr, iv, enc) == 1
                                       : EVP_CipherInit_ex(c, EVP_aes_256_gcm(), nullptr, ctx_->key, iv, enc) == 1;
  if (!init) return openssl_error("AES-256-GCM setup");
  ctx_->mode = mode;
  int len = 0;
  if (!ad.empty() && EVP_CipherUpdate(c, nullptr, &len, u8(ad.data()), static_cast<int>(ad.size())) != 1) {
    return openssl_error("AES-256-GCM");
  }
  for (std::size_t at = 0; at < size;) {
    const int chunk = static_cast<int>(std::min<std::size_t>(size - at, std::size_t{1} << 30));
    if (EVP_CipherUpdate(c, u8(out + at), &len, u8(in + at), chunk) != 1) return openssl_error("AES-256-GCM");
    at += static_cast<std::size_t>(chunk);
  }
  return ok_status();
}

Status CipherState::seal_at(std::uint64_t n, std::string_view ad, const std::byte* in, std::size_t size,
                            std::byte* out, std::byte* tag) {
  if (auto st = crypt(n, ad, in, size, out, true); !st) return st;
  int len = 0;
  if (EVP_EncryptFinal_ex(ctx_->ctx, u8(out + size), &len) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx_->ctx, EVP_CTRL_GCM_GET_TAG, static_cast<int>(k_tag_bytes), tag) != 1) {
    return openssl_error("AES-256-GCM");
  }
  return ok_status();
}

Status CipherState::open_at(std::uint64_t n, std::string_view ad, const std::byte* in, std::size_t size,
                            std::byte* out, const std::byte* tag) {
  if (auto st = crypt(n, ad, in, size, out, false); !st) return st;
  EVP_CIPHER_CTX* c = ctx_->ctx;
  int len = 0;
  unsigned char t[k_tag_bytes];
  std::memcpy(t, tag, k_tag_bytes);
  if (EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, static_cast<int>(k_tag_bytes), t) != 1) {
    return openssl_error("AES-256-GCM");
  }
  if (EVP_DecryptFinal_ex(c, u8(out + size), &len) != 1) {
    return make_error(errc::crypto, "message {} failed authentication: forged, replayed, reordered or truncated", n);
  }
  return ok_status();
}

Result<std::string> CipherState::encrypt_with_ad(std::string_view ad, std::string_view plaintext) {
  if (!has_key_) return std::string(plaintext);
  std::string out(plaintext.size() + k_tag_bytes, '\0');
  auto* o = reinterpret_cast<std::byte*>(out.data());
  if (auto st = seal(ad, reinterpret_cast<const std::byte*>(plaintext.data()), plaintext.size(), o,
                     o + plaintext.size());
      !st) {
    return st.error();
  }
  return out;
}

Result<std::string> CipherState::decrypt_with_ad(std::string_view ad, std::string_view ciphertext) {
  if (!has_key_) return std::string(ciphertext);
  if (ciphertext.size() < k_tag_bytes) {
    return make_error(errc::malformed, "noise: a ciphertext of {} bytes is shorter than its tag", ciphertext.size());
  }
  const std::size_t size = ciphertext.size() - k_tag_bytes;
  std::string out(size, '\0');
  const auto* in = reinterpret_cast<const std::byte*>(ciphertext.data());
  if (auto st = open(ad, in, size, reinterpret_cast<std::byte*>(out.data()), in + size); !st) return st.error();
  return out;
}

// ---- XX --------------------------------------------------------------------------

struct XxHandshake::State {
  explicit State(bool init) : initiator(init) {}
  bool initiator;
  int step = 0;  ///< messages written or read so far (0..3)
  PkeyPtr s{nullptr, &EVP_PKEY_free};
  PkeyPtr e{nullptr, &EVP_PKEY_free};
  std::string s_pub, e_pub, rs, re;
  std::string ck, h;
  CipherState cs;

  void mix_hash(std::string_view data) { h = sha256(h, data); }
  void mix_key(std::string_view ikm) {
    auto [ck2, k] = hkdf2(ck, ikm);
    ck = std::move(ck2);
    cs.initialize_key(k);
  }
  Status mix_dh(EVP_PKEY* mine, std::string_view theirs) {
    auto shared = x25519_dh(mine, theirs);
    if (!shared) return shared.error();
    mix_key(*shared);
    OPENSSL_cleanse(shared->data(), shared->size());
    return ok_status();
  }
  Result<std::string> encrypt_and_hash(std::string_view p) {
    auto c = cs.encrypt_with_ad(h, p);
    if (c) mix_hash(*c);
    return c;
  }
  Result<std::string> decrypt_and_hash(std::string_view c) {
    auto p = cs.decrypt_with_ad(h, c);
    if (p) mix_hash(c);
    return p;
  }
  /// Our static key sealed, DH(s, re) mixed in (es for the responder, se for the
  /// initiator), then the sealed payload: the tail of messages 2 and 3.
  Status write_static(std::string& out, std::string_view payload) {
    auto sealed_s = encrypt_and_hash(s_pub);
    if (!sealed_s) return sealed_s.error();
    out += *sealed_s;
    if (auto r = mix_dh(s.get(), re); !r) return r.error();
    auto sealed_p = encrypt_and_hash(payload);
    if (!sealed_p) return sealed_p.error();
    out += *sealed_p;
    return ok_status();
  }
};

XxHandshake::XxHandshake(std::unique_ptr<State> s) : s_(std::move(s)) {}
XxHandshake::~XxHandshake() = default;
XxHandshake::XxHandshake(XxHandshake&&) noexcept = default;
XxHandshake& XxHandshake::operator=(XxHandshake&&) noexcept = default;

Result<XxHandshake> XxHandshake::create(bool initiator, std::string_view prologue, std::string_view static_private,
                                        std::string_view ephemeral_private) {
  auto s = static_private.empty() ? x25519_generate() : x25519_from_private(static_private);
  if (!s) return s.error();
  auto e = ephemeral_private.empty() ? x25519_generate() : x25519_from_private(ephemeral_private);
  if (!e) return e.error();
  auto st = std::make_unique<State>(initiator);
  st->s = std::move(*s);
  st->e = std::move(*e);
  st->s_pub = x25519_public(st->s.get());
  st->e_pub = x25519_public(st->e.get());
  if (st->s_pub.empty() || st->e_pub.empty()) return openssl_error("reading an X25519 public key");
  // The name fits in HASHLEN: h is the name padded with zeros.
  st->h = std::string(k_protocol);
  st->h.resize(k_hash_bytes, '\0');
  st->ck = st->h;
  st->mix_hash(prologue);
  return XxHandshake(std::move(st));
}

bool XxHandshake::done() const { return s_->step == 3; }
bool XxHandshake::my_turn() const { return s_->step < 3 && ((s_->step % 2 == 0) == s_->initiator); }
int XxHandshake::step() const { return s_->step; }
const std::string& XxHandshake::handshake_hash() const { return s_->h; }
const std::string& XxHandshake::local_static() const { return s_->s_pub; }
const std::string& XxHandshake::remote_static() const { return s_->rs; }

Result<std::string> XxHandshake::write_message(std::string_view payload) {
  State& st = *s_;
  if (!my_turn()) {
    return make_error(errc::protocol, "noise: handshake message {} is the peer's to send, not ours", st.step + 1);
  }
  std::string out;
  if (st.step == 0) {  // -> e
    out = st.e_pub;
    st.mix_hash(st.e_pub);
    auto p = st.encrypt_and_hash(payload);
    if (!p) return p.error();
    out += *p;
  } else if (st.step == 1) {  // <- e, ee, s, es
    out = st.e_pub;
    st.mix_hash(st.e_pub);
    if (auto r = st.mix_dh(st.e.get(), st.re); !r) return r.error();
    if (auto r = st.write_static(out, payload); !r) return r.error();
  } else if (auto r = st.write_static(out, payload); !r) {  // -> s, se
    return r.error();
  }
  if (out.size() > k_max_message_bytes) {
    return make_error(errc::invalid_argument, "noise: handshake message {} would be {} bytes, over {}", st.step + 1,
                      out.size(), k_max_message_bytes);
  }
  ++st.step;
  return out;
}

Result<std::string> XxHandshake::read_message(std::string_view m) {
  State& st = *s_;
  if (st.step >= 3 || my_turn()) {
    return make_error(errc::protocol, "noise: got a handshake message where message {} was ours to send",
                      st.step + 1);
  }
  if (m.size() > k_max_message_bytes) {
    return make_error(errc::malformed, "noise: a handshake message of {} bytes exceeds {}", m.size(),
                      k_max_message_bytes);
  }
  const std::size_t sealed_key = k_dh_bytes + k_tag_bytes;
  Result<std::string> payload = std::string();
  if (st.step == 0) {  // -> e
    if (m.size() < k_dh_bytes) {
      return make_error(errc::malformed, "noise: handshake message 1 is {} bytes, shorter than its key", m.size());
    }
    st.re = std::string(m.substr(0, k_dh_bytes));
    st.mix_hash(st.re);
    payload = st.decrypt_and_hash(m.substr(k_dh_bytes));
  } else if (st.step == 1) {  // <- e, ee, s, es
    if (m.size() < k_dh_bytes + sealed_key + k_tag_bytes) {
      return make_error(errc::malformed, "noise: handshake message 2 is {} bytes, shorter than its keys", m.size());
    }
    st.re = std::string(m.substr(0, k_dh_bytes));
    st.mix_hash(st.re);
    if (auto r = st.mix_dh(st.e.get(), st.re); !r) return r.error();
    auto rs = st.decrypt_and_hash(m.substr(k_dh_bytes, sealed_key));
    if (!rs) return make_error(errc::crypto, "noise: handshake message 2: {}", rs.error().message);
    st.rs = std::move(*rs);
    if (auto r = st.mix_dh(st.e.get(), st.rs); !r) return r.error();
    payload = st.decrypt_and_hash(m.substr(k_dh_bytes + sealed_key));
  } else {  // -> s, se
    if (m.size() < sealed_key + k_tag_bytes) {
      return make_error(errc::malformed, "noise: handshake message 3 is {} bytes, shorter than its key", m.size());
    }
    auto rs = st.decrypt_and_hash(m.substr(0, sealed_key));
    if (!rs) return make_error(errc::crypto, "noise: handshake message 3: {}", rs.error().message);
    st.rs = std::move(*rs);
    if (auto r = st.mix_dh(st.e.get(), st.rs); !r) return r.error();
    payload = st.decrypt_and_hash(m.substr(sealed_key));
  }
  if (!payload) return make_error(errc::crypto, "noise: handshake message {}: {}", st.step + 1, payload.error().message);
  ++st.step;
  return payload;
}

Result<std::pair<CipherState, CipherState>> XxHandshake::split() {
  State& st = *s_;
  if (!done()) return make_error(errc::protocol, "noise: the handshake is not finished");
  auto [k1, k2] = hkdf2(st.ck, {});
  std::pair<CipherState, CipherState> out;
  // k1 carries initiator → responder, k2 the other way.
  out.first.initialize_key(st.initiator ? k1 : k2);
  out.second.initialize_key(st.initiator ? k2 : k1);
  OPENSSL_cleanse(k1.data(), k1.size());
  OPENSSL_cleanse(k2.data(), k2.size());
  return out;
}

// ---- Handshake (libp2p's) -------------------------------------------------------------

struct Handshake::State {
  State(XxHandshake x, Ed25519PrivateKey id) : xx(std::move(x)), identity(std::move(id)) {}
  XxHandshake xx;
  Ed25519PrivateKey identity;
  std::string listen_addr;
  std::string signed_static;  ///< when set, what the identity signs instead of our static key (tests)
  std::optional<PeerId> remote;
  std::string remote_listen;

  /// Our identity payload: the identity key and its signature of our static key.
  Result<std::string> payload() const {
    pb::NoiseHandshakePayload msg;
    msg.set_identity_key(encode_public_key_proto(identity.public_key()));
    auto sig = identity.sign(std::string(k_static_key_prefix) +
                             (signed_static.empty() ? xx.local_static() : signed_static));
    if (!sig) return sig.error();
    msg.set_identity_sig(*sig);
    msg.set_listen_addr(listen_addr);
    return msg.SerializeAsString();
  }
  Status verify(std::string_view bytes) {
    pb::NoiseHandshakePayload msg;
    if (!msg.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
      return make_error(errc::malformed, "noise: the peer's handshake payload is not a NoiseHandshakePayload");
    }
    auto key = decode_public_key_proto(msg.identity_key());
    if (!key) return make_error(key.error().code, "noise: the peer's identity key: {}", key.error().message);
    if (!key->verify(std::string(k_static_key_prefix) + xx.remote_static(), msg.identity_sig())) {
      return make_error(errc::crypto,
                        "noise: the peer's signature does not bind its static key to identity {}; "
                        "it does not hold that identity's private key",
                        PeerId::from_public_key(*key).to_string());
    }
    remote = PeerId::from_public_key(*key);
    remote_listen = msg.listen_addr().substr(0, 256);
    return ok_status();
  }
};

Handshake::Handshake(std::unique_ptr<State> s) : s_(std::move(s)) {}
Handshake::~Handshake() = default;
Handshake::Handshake(Handshake&&) noexcept = default;
Handshake& Handshake::operator=(Handshake&&) noexcept = default;

Result<Handshake> Handshake::create(bool initiator, const Ed25519PrivateKey& identity, std::string listen_addr) {
  return create_with_keys(initiator, identity, std::move(listen_addr), {}, {});
}

Result<Handshake> Handshake::create_with_keys(bool initiator, const Ed25519PrivateKey& identity,
                                              std::string listen_addr, std::string_view static_private,
                                              std::string_view ephemeral_private, std::string_view signed_static) {
  // libp2p's prologue is empty.
  auto xx = XxHandshake::create(initiator, {}, static_private, ephemeral_private);
  if (!xx) return xx.error();
  auto st = std::make_unique<State>(std::move(*xx), identity);
  st->listen_addr = std::move(listen_addr);
  st->signed_static = std::string(signed_static);
  return Handshake(std::move(st));
}

bool Handshake::done() const { return s_->xx.done(); }

bool Handshake::my_turn() const { return s_->xx.my_turn(); }

std::string Handshake::handshake_hash() const { return s_->xx.handshake_hash(); }

Result<std::string> Handshake::write_message() {
  State& st = *s_;
  if (st.xx.step() == 0 || !st.xx.my_turn()) return st.xx.write_message({});  // -> e: no payload
  auto payload = st.payload();
  if (!payload) return payload.error();
  return st.xx.write_message(*payload);
}

Status Handshake::read_message(std::string_view m) {
  State& st = *s_;
  const int step = st.xx.step();
  if (step == 0 && !st.xx.my_turn() && m.size() != k_dh_bytes) {
    return make_error(errc::malformed, "noise: handshake message 1 is {} bytes, expected {}", m.size(), k_dh_bytes);
  }
  auto payload = st.xx.read_message(m);
  if (!payload) return payload.error();
  if (step == 0) return ok_status();
  return st.verify(*payload);
}

Result<Session> Handshake::finish() {
  State& st = *s_;
  if (!done() || !st.remote) return make_error(errc::protocol, "noise: the handshake is not finished");
  auto ciphers = st.xx.split();
  if (!ciphers) return ciphers.error();
  return Session{std::move(ciphers->first), std::move(ciphers->second), *st.remote, st.remote_listen,
                 st.xx.local_static(), st.xx.remote_static()};
}

}  // namespace apiary::messages::noise
