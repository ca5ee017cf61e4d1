#pragma once
/// Identity key files: a node's Ed25519 key on disk, in libp2p's PrivateKey encoding
/// (68 bytes: 08 01 12 40 <seed> <public key>), the format libp2p tools read and write.
/// Files are written with mode 0600 whatever the umask, and replaced atomically.
#include <string>

#include "messages/identity/ed25519.hpp"
#include "messages/result.hpp"

namespace apiary::messages {

/// Largest key file load_key_file reads, in bytes (an Ed25519 key file is 68).
inline constexpr std::size_t max_key_file_size = 4096;

/// Writes `key` to `path` with mode 0600, replacing any existing file atomically
/// (a temporary file in the same directory, then rename). The directory must exist.
/// Errors: errc::io naming the path and the OS error.
Status save_key_file(const std::string& path, const Ed25519PrivateKey& key);

/// Reads the key stored at `path`. The file's permissions are not checked.
/// Errors: errc::not_found (no such file), errc::io (unreadable, not a regular file),
/// errc::malformed (wrong size, not a libp2p PrivateKey, corrupted key),
/// errc::unsupported (a libp2p key of another type, e.g. RSA).
Result<Ed25519PrivateKey> load_key_file(const std::string& path);

/// Loads the key at `path`, or, when there is no file there, generates a key and
/// stores it (mode 0600). Safe against a concurrent creator: if another process
/// creates the file first, its key is loaded and returned. Errors: those of
/// load_key_file (other than not_found) and of save_key_file.
Result<Ed25519PrivateKey> load_or_create_key_file(const std::string& path);

}  // namespace apiary::messages
