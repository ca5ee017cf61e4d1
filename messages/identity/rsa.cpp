#include "messages/identity/rsa.hpp"

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/param_build.h>
#include <openssl/rsa.h>

#include <cstdint>

namespace apiary::messages {
namespace {

constexpr std::string_view k_ssh_rsa = "ssh-rsa";

std::shared_ptr<EVP_PKEY> own(EVP_PKEY* p) { return {p, &EVP_PKEY_free}; }

std::string base64(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<int>(bytes.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

Result<std::string> unbase64(std::string_view text) {
  if (text.empty() || text.size() % 4 != 0) {
    return make_error(errc::malformed, "OpenSSH key: expected padded base64, got {} characters", text.size());
  }
  std::string out(text.size() / 4 * 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(text.data()), static_cast<int>(text.size()));
  if (n < 0) return make_error(errc::malformed, "OpenSSH key: the blob is not base64");
  std::size_t size = static_cast<std::size_t>(n);
  if (text.back() == '=') --size;  // EVP_DecodeBlock counts padding as zero bytes
  if (text[text.size() - 2] == '=') --size;
  out.resize(size);
  return out;
}

/// SSH wire strings: a 4-byte big-endian length, then the bytes.
void put_string(std::string& out, std::string_view s) {
  const auto n = static_cast<std::uint32_t>(s.size());
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>((n >> shift) & 0xff));
  out.append(s);
}

Result<std::string_view> take_string(std::string_view& in) {
  if (in.size() < 4) return make_error(errc::malformed, "OpenSSH key: the blob ends inside a length");
  std::uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n = (n << 8) | static_cast<unsigned char>(in[static_cast<std::size_t>(i)]);
  in.remove_prefix(4);
  if (n > in.size()) return make_error(errc::malformed, "OpenSSH key: a field of {} bytes overruns the blob", n);
  auto s = in.substr(0, n);
  in.remove_prefix(n);
  return s;
}

/// An mpint: big-endian magnitude with a leading zero byte when the top bit is set.
std::string mpint(const BIGNUM* bn) {
  std::string bytes(static_cast<std::size_t>(BN_num_bytes(bn)), '\0');
  BN_bn2bin(bn, reinterpret_cast<unsigned char*>(bytes.data()));
  if (!bytes.empty() && (static_cast<unsigned char>(bytes[0]) & 0x80)) bytes.insert(bytes.begin(), '\0');
  return bytes;
}

Result<std::string> openssh_of(EVP_PKEY* pkey) {
  BIGNUM* n = nullptr;
  BIGNUM* e = nullptr;
  if (EVP_PKEY_get_bn_param(pkey, OSSL_PKEY_PARAM_RSA_N, &n) != 1 ||
      EVP_PKEY_get_bn_param(pkey, OSSL_PKEY_PARAM_RSA_E, &e) != 1) {
    BN_free(n);
    return make_error(errc::crypto, "RSA: cannot read the key's modulus and exponent");
  }
  std::string blob;
  put_string(blob, k_ssh_rsa);
  put_string(blob, mpint(e));
  put_string(blob, mpint(n));
  BN_free(n);
  BN_free(e);
  return std::string(k_ssh_rsa) + " " + base64(blob);
}

/// A digest context set up for RSA-PSS over SHA-256 (sign or verify).
bool setup_pss(EVP_PKEY_CTX* pctx, int saltlen) {
  return EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING) == 1 &&
         EVP_PKEY_CTX_set_rsa_mgf1_md(pctx, EVP_sha256()) == 1 && EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, saltlen) == 1;
}

}  // namespace

Result<RsaPublicKey> RsaPublicKey::from_openssh(std::string_view text) {
  if (text.substr(0, k_ssh_rsa.size() + 1) != "ssh-rsa ") {
    return make_error(errc::malformed, "OpenSSH key: expected text starting with \"ssh-rsa \"");
  }
  std::string_view rest = text.substr(k_ssh_rsa.size() + 1);
  rest = rest.substr(0, rest.find(' '));
  auto blob = unbase64(rest);
  if (!blob) return blob.error();
  std::string_view in = *blob;
  auto type = take_string(in);
  if (!type) return type.error();
  if (*type != k_ssh_rsa) return make_error(errc::malformed, "OpenSSH key: the blob names type \"{}\", not ssh-rsa", *type);
  auto e = take_string(in);
  if (!e) return e.error();
  auto n = take_string(in);
  if (!n) return n.error();
  if (!in.empty()) return make_error(errc::malformed, "OpenSSH key: {} bytes after the modulus", in.size());
  std::unique_ptr<BIGNUM, decltype(&BN_free)> bn_e(
      BN_bin2bn(reinterpret_cast<const unsigned char*>(e->data()), static_cast<int>(e->size()), nullptr), &BN_free);
  std::unique_ptr<BIGNUM, decltype(&BN_free)> bn_n(
      BN_bin2bn(reinterpret_cast<const unsigned char*>(n->data()), static_cast<int>(n->size()), nullptr), &BN_free);
  std::unique_ptr<OSSL_PARAM_BLD, decltype(&OSSL_PARAM_BLD_free)> bld(OSSL_PARAM_BLD_new(), &OSSL_PARAM_BLD_free);
  if (!bn_e || !bn_n || !bld || OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_RSA_N, bn_n.get()) != 1 ||
      OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_RSA_E, bn_e.get()) != 1) {
    return make_error(errc::crypto, "RSA: cannot build the key's parameters");
  }
  std::unique_ptr<OSSL_PARAM, decltype(&OSSL_PARAM_free)> params(OSSL_PARAM_BLD_to_param(bld.get()), &OSSL_PARAM_free);
  std::unique_ptr<EVP_PKEY_CTX, decltype(&EVP_PKEY_CTX_free)> ctx(EVP_PKEY_CTX_new_from_name(nullptr, "RSA", nullptr),
                                                                  &EVP_PKEY_CTX_free);
  EVP_PKEY* pkey = nullptr;
  if (!params || !ctx || EVP_PKEY_fromdata_init(ctx.get()) != 1 ||
      EVP_PKEY_fromdata(ctx.get(), &pkey, EVP_PKEY_PUBLIC_KEY, params.get()) != 1) {
    return make_error(errc::crypto, "RSA: OpenSSL refuses the key");
  }
  return RsaPublicKey(own(pkey), std::string(k_ssh_rsa) + " " + std::string(rest));
}

bool RsaPublicKey::verify_pss(std::string_view message, std::string_view signature) const {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> md(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  EVP_PKEY_CTX* pctx = nullptr;
  if (!md || EVP_DigestVerifyInit(md.get(), &pctx, EVP_sha256(), nullptr, pkey_.get()) != 1 ||
      !setup_pss(pctx, RSA_PSS_SALTLEN_AUTO)) {
    return false;
  }
  return EVP_DigestVerify(md.get(), reinterpret_cast<const unsigned char*>(signature.data()), signature.size(),
                          reinterpret_cast<const unsigned char*>(message.data()), message.size()) == 1;
}

Result<RsaPrivateKey> RsaPrivateKey::generate(int bits) {
  EVP_PKEY* raw = EVP_RSA_gen(static_cast<unsigned int>(bits));
  if (raw == nullptr) return make_error(errc::crypto, "RSA: cannot generate a {}-bit key", bits);
  auto pkey = own(raw);
  auto text = openssh_of(raw);
  if (!text) return text.error();
  return RsaPrivateKey(pkey, RsaPublicKey(pkey, std::move(*text)));
}

Result<RsaPrivateKey> RsaPrivateKey::from_der(std::string_view der) {
  const auto* p = reinterpret_cast<const unsigned char*>(der.data());
  EVP_PKEY* raw = d2i_AutoPrivateKey(nullptr, &p, static_cast<long>(der.size()));
  if (raw == nullptr) return make_error(errc::malformed, "RSA: expected a DER private key, got {} bytes that do not parse", der.size());
  auto pkey = own(raw);
  if (EVP_PKEY_get_base_id(raw) != EVP_PKEY_RSA) return make_error(errc::malformed, "RSA: the DER private key is not an RSA key");
  if (p != reinterpret_cast<const unsigned char*>(der.data()) + der.size()) {
    return make_error(errc::malformed, "RSA: {} bytes follow the DER private key", reinterpret_cast<const unsigned char*>(der.data()) + der.size() - p);
  }
  auto text = openssh_of(raw);
  if (!text) return text.error();
  return RsaPrivateKey(pkey, RsaPublicKey(pkey, std::move(*text)));
}

Result<std::string> RsaPrivateKey::to_der() const {
  unsigned char* out = nullptr;
  const int size = i2d_PrivateKey(pkey_.get(), &out);
  if (size <= 0 || out == nullptr) return make_error(errc::crypto, "RSA: cannot encode the private key as DER");
  std::string der(reinterpret_cast<const char*>(out), static_cast<std::size_t>(size));
  OPENSSL_free(out);
  return der;
}

Result<std::string> RsaPrivateKey::sign_pss(std::string_view message) const {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> md(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  EVP_PKEY_CTX* pctx = nullptr;
  std::size_t size = 0;
  if (!md || EVP_DigestSignInit(md.get(), &pctx, EVP_sha256(), nullptr, pkey_.get()) != 1 ||
      !setup_pss(pctx, RSA_PSS_SALTLEN_MAX) ||
      EVP_DigestSign(md.get(), nullptr, &size, reinterpret_cast<const unsigned char*>(message.data()),
                     message.size()) != 1) {
    return make_error(errc::crypto, "RSA: cannot set up an RSA-PSS signature");
  }
  std::string sig(size, '\0');
  if (EVP_DigestSign(md.get(), reinterpret_cast<unsigned char*>(sig.data()), &size,
                     reinterpret_cast<const unsigned char*>(message.data()), message.size()) != 1) {
    return make_error(errc::crypto, "RSA: signing failed");
  }
  sig.resize(size);
  return sig;
}

}  // namespace apiary::messages
