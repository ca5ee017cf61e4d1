#pragma once
/// Value: what local operations carry between a host's API and a role, or between two
/// roles of one process (arguments of an Ask or a LocalCall, results of a Complete).
/// It never crosses a process, so it is not serialized: it holds any C++ value by shared
/// pointer and hands it back as the type it was made of.
#include <memory>
#include <typeinfo>
#include <utility>

namespace apiary::core {

class Value {
 public:
  Value() = default;

  /// Holds `v`, moved in.
  template <class T>
  static Value of(T v) {
    Value out;
    out.value_ = std::make_shared<T>(std::move(v));
    out.type_ = &typeid(T);
    return out;
  }

  /// The held value if it is a T; nullptr when empty or of another type.
  template <class T>
  [[nodiscard]] T* as() const {
    return type_ != nullptr && *type_ == typeid(T) ? static_cast<T*>(value_.get()) : nullptr;
  }

  /// What keeps the held value alive (for views of memory inside it that must outlive
  /// this Value, e.g. a message body sent from a tensor the value holds).
  [[nodiscard]] std::shared_ptr<void> holder() const { return value_; }
  /// Whether another Value (or a holder()) shares the held value.
  [[nodiscard]] bool shared() const { return value_.use_count() > 1; }
  /// Whether a value is held.
  [[nodiscard]] bool empty() const { return value_ == nullptr; }

  /// The held value's type name (for error messages), or "nothing".
  [[nodiscard]] const char* type_name() const { return type_ != nullptr ? type_->name() : "nothing"; }

 private:
  std::shared_ptr<void> value_;
  const std::type_info* type_ = nullptr;
};

}  // namespace apiary::core
