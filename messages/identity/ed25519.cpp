#include "messages/identity/ed25519.hpp"

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>

namespace apiary::messages {
namespace {

/// OpenSSL's most recent error on this thread, as text (and clears the queue).
std::string openssl_error() {
  unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return "no OpenSSL error recorded";
  char text[256];
  ERR_error_string_n(code, text, sizeof text);
  return text;
}

std::shared_ptr<EVP_PKEY> own(EVP_PKEY* pkey) { return {pkey, &EVP_PKEY_free}; }

using md_ctx_ptr = std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)>;

const unsigned char* as_uchars(std::string_view s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

}  // namespace

Result<Ed25519PublicKey> Ed25519PublicKey::from_bytes(std::string_view raw) {
  if (raw.size() != ed25519_public_key_size) {
    return make_error(errc::invalid_argument,
                      "Ed25519 public key: expected {} raw bytes, got {}; pass the raw key, "
                      "not a protobuf- or PEM-encoded one",
                      ed25519_public_key_size, raw.size());
  }
  EVP_PKEY* pkey =
      EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nullptr, as_uchars(raw), raw.size());
  if (pkey == nullptr) {
    return make_error(errc::crypto, "Ed25519 public key: OpenSSL rejected the 32 bytes ({})",
                      openssl_error());
  }
  return Ed25519PublicKey(own(pkey), std::string(raw));
}

bool Ed25519PublicKey::verify(std::string_view message, std::string_view signature) const {
  if (signature.size() != ed25519_signature_size || !pkey_) return false;
  md_ctx_ptr ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  if (!ctx || EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, pkey_.get()) != 1) {
    ERR_clear_error();
    return false;
  }
  int rc = EVP_DigestVerify(ctx.get(), as_uchars(signature), signature.size(), as_uchars(message),
                            message.size());
  if (rc != 1) ERR_clear_error();
  return rc == 1;
}

Result<Ed25519PrivateKey> Ed25519PrivateKey::from_pkey(EVP_PKEY* owned) {
  auto pkey = own(owned);
  std::string raw(ed25519_public_key_size, '\0');
  std::size_t size = raw.size();
  if (EVP_PKEY_get_raw_public_key(pkey.get(), reinterpret_cast<unsigned char*>(raw.data()),
                                  &size) != 1 ||
      size != ed25519_public_key_size) {
    return make_error(errc::crypto, "Ed25519 key: could not read the public key ({})",
                      openssl_error());
  }
  return Ed25519PrivateKey(pkey, Ed25519PublicKey(pkey, std::move(raw)));
}

Result<Ed25519PrivateKey> Ed25519PrivateKey::generate() {
  std::unique_ptr<EVP_PKEY_CTX, decltype(&EVP_PKEY_CTX_free)> ctx(
      EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, nullptr), &EVP_PKEY_CTX_free);
  EVP_PKEY* pkey = nullptr;
  if (!ctx || EVP_PKEY_keygen_init(ctx.get()) != 1 || EVP_PKEY_keygen(ctx.get(), &pkey) != 1) {
    return make_error(errc::crypto,
                      "Ed25519 key generation failed ({}); check that OpenSSL 3 is installed "
                      "with its default provider",
                      openssl_error());
  }
  return from_pkey(pkey);
}

Result<Ed25519PrivateKey> Ed25519PrivateKey::from_seed(std::string_view seed) {
  if (seed.size() != ed25519_seed_size) {
    return make_error(errc::invalid_argument,
                      "Ed25519 private key: expected a {}-byte seed, got {} bytes; a libp2p "
                      "64-byte private key is the seed followed by the public key",
                      ed25519_seed_size, seed.size());
  }
  EVP_PKEY* pkey =
      EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nullptr, as_uchars(seed), seed.size());
  if (pkey == nullptr) {
    return make_error(errc::crypto, "Ed25519 private key: OpenSSL rejected the seed ({})",
                      openssl_error());
  }
  return from_pkey(pkey);
}

std::string Ed25519PrivateKey::seed() const {
  std::string seed(ed25519_seed_size, '\0');
  std::size_t size = seed.size();
  if (EVP_PKEY_get_raw_private_key(pkey_.get(), reinterpret_cast<unsigned char*>(seed.data()),
                                   &size) != 1 ||
      size != ed25519_seed_size) {
    // Unreachable for a key built by this class; an empty seed makes misuse visible.
    ERR_clear_error();
    OPENSSL_cleanse(seed.data(), seed.size());
    return {};
  }
  return seed;
}

Result<std::string> Ed25519PrivateKey::sign(std::string_view message) const {
  md_ctx_ptr ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  std::string signature(ed25519_signature_size, '\0');
  std::size_t size = signature.size();
  if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, pkey_.get()) != 1 ||
      EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(signature.data()), &size,
                     as_uchars(message), message.size()) != 1 ||
      size != ed25519_signature_size) {
    return make_error(errc::crypto, "Ed25519 signing of {} bytes failed ({})", message.size(),
                      openssl_error());
  }
  return signature;
}

}  // namespace apiary::messages
