// Content hashes for cache keys and checksums: XXH3-128, printed as 32 hex digits.
#pragma once

#include <string>
#include <string_view>
#include <vector>

struct XXH3_state_s;

namespace coil {

/// XXH3-128 over a sequence of fields. Each field is length-prefixed, so ("ab", "c") and
/// ("a", "bc") hash differently.
class KeyHasher {
 public:
  KeyHasher();
  ~KeyHasher();
  KeyHasher(const KeyHasher&) = delete;
  KeyHasher& operator=(const KeyHasher&) = delete;

  void add(std::string_view field);
  /// The digest so far, as 32 lower-case hex digits.
  std::string hex() const;

 private:
  XXH3_state_s* state_;
};

/// XXH3-128 of `bytes` as 32 hex digits (checksums of cache entries).
std::string checksum(std::string_view bytes);
/// KeyHasher over `fields`.
std::string hash_fields(const std::vector<std::string>& fields);

}  // namespace coil
