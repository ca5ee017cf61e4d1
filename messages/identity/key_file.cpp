#include "messages/identity/key_file.hpp"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <system_error>

#include "messages/identity/key_proto.hpp"

namespace apiary::messages {
namespace {

std::string os_error(int err) { return std::generic_category().message(err); }

/// Closes a file descriptor when it goes out of scope.
class fd_guard {
 public:
  explicit fd_guard(int fd) : fd_(fd) {}
  fd_guard(const fd_guard&) = delete;
  fd_guard& operator=(const fd_guard&) = delete;
  ~fd_guard() { close_now(); }
  int get() const { return fd_; }
  /// Closes now; returns the errno of a failed close, or 0.
  int close_now() {
    int err = 0;
    if (fd_ >= 0 && ::close(fd_) != 0) err = errno;
    fd_ = -1;
    return err;
  }

 private:
  int fd_;
};

/// Wipes a buffer holding key material when it goes out of scope.
struct wipe_on_exit {
  std::string& secret;
  ~wipe_on_exit() { OPENSSL_cleanse(secret.data(), secret.size()); }
};

Error io_error(const std::string& path, const char* action, int err) {
  return make_error(errc::io,
                    "key file \"{}\": could not {} ({}); check the path and its "
                    "directory's permissions",
                    path, action, os_error(err));
}

/// Flushes the directory holding `path` so a rename or link into it is durable.
/// Best effort: some file systems do not support fsync on directories.
void sync_parent_directory(const std::string& path) {
  auto slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

/// Writes `bytes` to a new mode-0600 temporary file next to `path`; returns its name.
Result<std::string> write_temporary(const std::string& path, const std::string& bytes) {
  std::string temp = path + ".tmp-XXXXXX";
  fd_guard fd(::mkostemp(temp.data(), O_CLOEXEC));
  if (fd.get() < 0) return io_error(path, "create a temporary file next to it", errno);
  auto fail = [&](const char* action) {
    int err = errno;
    fd.close_now();
    ::unlink(temp.c_str());
    return io_error(path, action, err);
  };
  // mkstemp already uses 0600; fchmod makes it independent of the umask and libc.
  if (::fchmod(fd.get(), S_IRUSR | S_IWUSR) != 0) return fail("set mode 0600 on it");
  std::size_t written = 0;
  while (written < bytes.size()) {
    ssize_t n = ::write(fd.get(), bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail("write it");
    written += static_cast<std::size_t>(n);
  }
  if (::fsync(fd.get()) != 0) return fail("flush it to disk");
  if (int err = fd.close_now(); err != 0) {
    ::unlink(temp.c_str());
    return io_error(path, "close it", err);
  }
  return temp;
}

}  // namespace

Status save_key_file(const std::string& path, const Ed25519PrivateKey& key) {
  std::string bytes = encode_private_key_proto(key);
  wipe_on_exit wipe{bytes};
  auto temp = write_temporary(path, bytes);
  if (!temp) return temp.error();
  if (::rename(temp->c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(temp->c_str());
    return io_error(path, "move the new key into place", err);
  }
  sync_parent_directory(path);
  return ok_status();
}

Result<Ed25519PrivateKey> load_key_file(const std::string& path) {
  fd_guard fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    int err = errno;
    if (err == ENOENT) {
      return make_error(errc::not_found,
                        "key file \"{}\": no such file; expected an Ed25519 identity key "
                        "there (libp2p PrivateKey encoding); give the path of an existing key "
                        "file, or let the node create one",
                        path);
    }
    return io_error(path, "open it for reading", err);
  }
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) return io_error(path, "read its status", errno);
  if (!S_ISREG(info.st_mode)) {
    return make_error(errc::io,
                      "key file \"{}\": expected a regular file, found a directory or "
                      "device; give the path of the key file itself",
                      path);
  }
  // Read one byte past the limit so an oversized file is detected without trusting st_size.
  std::string bytes(max_key_file_size + 1, '\0');
  wipe_on_exit wipe{bytes};
  std::size_t got = 0;
  while (got < bytes.size()) {
    ssize_t n = ::read(fd.get(), bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return io_error(path, "read it", errno);
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  std::string_view content(bytes.data(), got);

  auto key = [&]() -> Result<Ed25519PrivateKey> {
    if (got != ed25519_private_key_proto_size) {
      return make_error(errc::malformed,
                        "key file \"{}\": expected {} bytes (a libp2p Ed25519 PrivateKey), the "
                        "file has {}{}; it is not an apiary identity key, move it aside to "
                        "create a new one",
                        path, ed25519_private_key_proto_size,
                        got > max_key_file_size ? "more than " : "",
                        got > max_key_file_size ? max_key_file_size : got);
    }
    auto decoded = decode_private_key_proto(content);
    if (!decoded) {
      decoded.error().message = fmt::format("key file \"{}\": {}", path, decoded.error().message);
    }
    return decoded;
  }();
  return key;
}

Result<Ed25519PrivateKey> load_or_create_key_file(const std::string& path) {
  auto existing = load_key_file(path);
  if (existing || existing.error().code != errc::not_found) return existing;

  auto key = Ed25519PrivateKey::generate();
  if (!key) return key.error();
  std::string bytes = encode_private_key_proto(*key);
  wipe_on_exit wipe{bytes};
  auto temp = write_temporary(path, bytes);
  if (!temp) return temp.error();
  // link() fails with EEXIST instead of replacing: the first creator's key wins.
  int rc = ::link(temp->c_str(), path.c_str());
  int err = errno;
  ::unlink(temp->c_str());
  if (rc != 0) {
    if (err == EEXIST) return load_key_file(path);
    return io_error(path, "create it", err);
  }
  sync_parent_directory(path);
  return key;
}

}  // namespace apiary::messages
