#include "support/hash.h"

#include <xxhash.h>

#include <fmt/format.h>

#include "support/check.h"

namespace coil {
namespace {

std::string hex128(XXH128_hash_t hash) {
  XXH128_canonical_t canonical;
  XXH128_canonicalFromHash(&canonical, hash);
  std::string out;
  for (unsigned char byte : canonical.digest) out += fmt::format("{:02x}", byte);
  return out;
}

}  // namespace

KeyHasher::KeyHasher() : state_(XXH3_createState()) {
  COIL_ASSERT(state_ != nullptr, "XXH3_createState failed");
  XXH3_128bits_reset(state_);
}

KeyHasher::~KeyHasher() {
  XXH3_freeState(state_);
}

void KeyHasher::add(std::string_view field) {
  uint64_t size = field.size();
  XXH3_128bits_update(state_, &size, sizeof size);
  XXH3_128bits_update(state_, field.data(), field.size());
}

std::string KeyHasher::hex() const {
  return hex128(XXH3_128bits_digest(state_));
}

std::string checksum(std::string_view bytes) {
  return hex128(XXH3_128bits(bytes.data(), bytes.size()));
}

std::string hash_fields(const std::vector<std::string>& fields) {
  KeyHasher h;
  for (const std::string& f : fields) h.add(f);
  return h.hex();
}

}  // namespace coil
