#include "core/moe/expert_state.hpp"

#include <cstring>

namespace apiary::core::moe {
namespace {

constexpr std::string_view k_magic = "apiary-expert-state-1";

template <class T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

/// Reads a T at `at`, advancing it; false past the end.
template <class T>
bool take(std::string_view in, std::size_t& at, T& value) {
  if (in.size() - at < sizeof(T)) return false;
  std::memcpy(&value, in.data() + at, sizeof(T));
  at += sizeof(T);
  return true;
}

}  // namespace

std::string pack_state(std::string_view cls, std::uint32_t h, const std::vector<const std::vector<float>*>& arrays) {
  std::string out(k_magic);
  put<std::uint32_t>(out, static_cast<std::uint32_t>(cls.size()));
  out.append(cls);
  put<std::uint32_t>(out, h);
  put<std::uint32_t>(out, static_cast<std::uint32_t>(arrays.size()));
  for (const auto* a : arrays) put<std::uint64_t>(out, a->size());
  for (const auto* a : arrays) out.append(reinterpret_cast<const char*>(a->data()), a->size() * sizeof(float));
  return out;
}

Status unpack_state(std::string_view state, std::string_view cls, std::uint32_t h,
                    const std::vector<std::vector<float>*>& arrays) {
  auto bad = [&](std::string_view why) {
    return make_error(errc::malformed, "not a saved state of a {} expert of hidden_dim {}: {}", cls, h, why);
  };
  if (state.substr(0, k_magic.size()) != k_magic) return bad("no apiary expert state header");
  std::size_t at = k_magic.size();
  std::uint32_t name_size = 0;
  if (!take(state, at, name_size) || state.size() - at < name_size) return bad("truncated");
  const std::string_view name = state.substr(at, name_size);
  at += name_size;
  if (name != cls) return bad(fmt::format("it is a {} expert's", name));
  std::uint32_t saved_h = 0;
  std::uint32_t count = 0;
  if (!take(state, at, saved_h) || !take(state, at, count)) return bad("truncated");
  if (saved_h != h) return bad(fmt::format("its hidden_dim is {}", saved_h));
  if (count != arrays.size()) return bad(fmt::format("{} arrays, expected {}", count, arrays.size()));
  for (const auto* a : arrays) {
    std::uint64_t size = 0;
    if (!take(state, at, size)) return bad("truncated");
    if (size != a->size()) return bad(fmt::format("an array of {} values, expected {}", size, a->size()));
  }
  std::size_t total = 0;
  for (const auto* a : arrays) total += a->size() * sizeof(float);
  if (state.size() - at != total) return bad(fmt::format("{} bytes of values, expected {}", state.size() - at, total));
  for (auto* a : arrays) {
    std::memcpy(a->data(), state.data() + at, a->size() * sizeof(float));
    at += a->size() * sizeof(float);
  }
  return ok_status();
}

}  // namespace apiary::core::moe
