#pragma once
/// Record validators (reference §2.8): checks a DHT node runs on every record it is asked
/// to store and on every record a search brings back, plus the matching transforms on the
/// value (sign before a local store, strip before handing a value to the application).
/// Validators compose: a CompositeValidator runs several in priority order.
#include <memory>
#include <string>
#include <vector>

#include "core/dht/timed_storage.hpp"
#include "messages/result.hpp"

namespace apiary::core::dht {

/// One stored item as validators see it (hivemind's DHTRecord).
struct DhtRecord {
  /// The key id's 20 bytes (NodeId::to_bytes()); validators read it as opaque bytes.
  std::string key;
  /// The subkey's msgpack bytes, or k_subkey_regular ("\xc0") for a regular value, or
  /// k_subkey_dictionary ("") for a whole dictionary value.
  std::string subkey;
  /// The value's bytes as stored (msgpack, possibly with markers such as a signature).
  std::string value;
  /// Absolute expiration time, seconds (DhtTime).
  DhtTime expiration = 0;
};

/// A check on records plus its value transforms. The defaults accept nothing special:
/// sign_value and strip_value return the value unchanged, priority is 0, nothing merges.
class RecordValidator {
 public:
  virtual ~RecordValidator() = default;

  /// True iff `record` may be stored (or, when found remotely, may be believed).
  [[nodiscard]] virtual bool validate(const DhtRecord& record) const = 0;

  /// The value to store locally for `record` (e.g. with a signature appended).
  /// Errors: whatever the transform can fail with (errc::crypto for signing).
  [[nodiscard]] virtual Result<std::string> sign_value(const DhtRecord& record) const;

  /// The value with this validator's markers removed, as the application stored it.
  [[nodiscard]] virtual std::string strip_value(const DhtRecord& record) const;

  /// Order among validators: signing runs in increasing priority, validating and
  /// stripping in decreasing priority (a signature is checked and stripped first).
  [[nodiscard]] virtual int priority() const { return 0; }

  /// Absorbs `other` into this validator if both are of a kind that merges (e.g. two
  /// schemas become one that accepts what either accepts); true iff absorbed, after which
  /// `other` is no longer needed.
  [[nodiscard]] virtual bool merge_with(const RecordValidator& other);
};

/// Several validators acting as one (hivemind's CompositeValidator): compatible ones are
/// merged, the rest kept sorted by decreasing priority.
class CompositeValidator final : public RecordValidator {
 public:
  /// An empty composite: validates everything, leaves values unchanged.
  CompositeValidator() = default;
  /// A composite of `validators`, added in order as by extend().
  explicit CompositeValidator(std::vector<std::unique_ptr<RecordValidator>> validators);

  /// Adds `validator`: merged into the first held validator whose merge_with accepts it,
  /// otherwise kept as its own entry; entries stay sorted by decreasing priority (stable
  /// among equal priorities). A null pointer is ignored.
  void extend(std::unique_ptr<RecordValidator> validator);

  /// Number of distinct validators held after merging.
  [[nodiscard]] std::size_t size() const { return validators_.size(); }

  /// True iff every validator accepts; from the highest priority down, each sees the
  /// value as stripped by the validators before it.
  [[nodiscard]] bool validate(const DhtRecord& record) const override;

  /// The value after every validator's sign_value, lowest priority first, each seeing
  /// the value signed by those before it. Errors: the first validator's error.
  [[nodiscard]] Result<std::string> sign_value(const DhtRecord& record) const override;

  /// The value after every validator's strip_value, highest priority first.
  [[nodiscard]] std::string strip_value(const DhtRecord& record) const override;

 private:
  std::vector<std::unique_ptr<RecordValidator>> validators_;  // decreasing priority
};

}  // namespace apiary::core::dht
