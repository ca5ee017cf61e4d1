#include "core/dht/validation.hpp"

#include <algorithm>
#include <utility>

namespace apiary::core::dht {

Result<std::string> RecordValidator::sign_value(const DhtRecord& record) const {
  return record.value;
}

std::string RecordValidator::strip_value(const DhtRecord& record) const { return record.value; }

bool RecordValidator::merge_with(const RecordValidator& /*other*/) { return false; }

CompositeValidator::CompositeValidator(std::vector<std::unique_ptr<RecordValidator>> validators) {
  for (auto& validator : validators) extend(std::move(validator));
}

void CompositeValidator::extend(std::unique_ptr<RecordValidator> validator) {
  if (!validator) return;
  for (auto& held : validators_) {
    if (held->merge_with(*validator)) return;
  }
  // Insert after every entry of equal or higher priority, keeping the order stable.
  const int priority = validator->priority();
  auto at = std::find_if(validators_.begin(), validators_.end(),
                         [&](const auto& held) { return held->priority() < priority; });
  validators_.insert(at, std::move(validator));
}

bool CompositeValidator::validate(const DhtRecord& record) const {
  DhtRecord current = record;
  for (const auto& validator : validators_) {
    // Check, then hand the next validator the value without this one's markers.
    if (!validator->validate(current)) return false;
    current.value = validator->strip_value(current);
  }
  return true;
}

Result<std::string> CompositeValidator::sign_value(const DhtRecord& record) const {
  DhtRecord current = record;
  for (auto it = validators_.rbegin(); it != validators_.rend(); ++it) {
    auto signed_value = (*it)->sign_value(current);
    if (!signed_value) return signed_value;
    current.value = std::move(*signed_value);
  }
  return current.value;
}

std::string CompositeValidator::strip_value(const DhtRecord& record) const {
  DhtRecord current = record;
  for (const auto& validator : validators_) current.value = validator->strip_value(current);
  return current.value;
}

}  // namespace apiary::core::dht
