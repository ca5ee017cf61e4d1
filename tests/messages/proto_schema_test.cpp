// The wire schemas, field by field, checked against the compiled descriptors in both
// directions: every row of proto_schema_table.hpp must exist with that number, type and
// label, and every message, field, enum and enum value of the schema files must have a
// row. A rename, renumbering, type change or new field therefore fails here until the
// table (the reviewed contract) is updated.
#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <tuple>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>

#include "auth.pb.h"
#include "averaging.pb.h"
#include "crypto.pb.h"
#include "dht.pb.h"
#include "graphitem.pb.h"
#include "runtime.pb.h"
#include "strategy.pb.h"
#include "synchronizers.pb.h"
#include "test.pb.h"
#include "tests/messages/proto_schema_table.hpp"

namespace {

using google::protobuf::Descriptor;
using google::protobuf::DescriptorPool;
using google::protobuf::EnumDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::FileDescriptor;
using namespace apiary::test::proto_schema;

const DescriptorPool& pool() { return *DescriptorPool::generated_pool(); }

// "int32", "apiary.pb.Tensor", "map<string, string>": what the table's type column holds.
std::string type_of(const FieldDescriptor* f) {
  if (f->is_map()) {
    const Descriptor* entry = f->message_type();
    return "map<" + type_of(entry->map_key()) + ", " + type_of(entry->map_value()) + ">";
  }
  if (f->message_type() != nullptr) return f->message_type()->full_name();
  if (f->enum_type() != nullptr) return f->enum_type()->full_name();
  return f->type_name();
}

// "singular", "repeated", "required", "map", "oneof <name>", or "optional" (explicit
// presence on a proto3 scalar, which upstream never uses).
std::string label_of(const FieldDescriptor* f) {
  if (f->is_map()) return "map";
  if (f->is_repeated()) return "repeated";
  if (f->is_required()) return "required";
  if (const auto* oneof = f->real_containing_oneof()) return "oneof " + oneof->name();
  if (f->has_optional_keyword()) return "optional";
  return "singular";
}

// Every message (not map entries) and enum declared in `file`, nested ones included.
void collect(const Descriptor* d, std::set<std::string>& messages, std::set<std::string>& enums) {
  if (d->options().map_entry()) return;
  messages.insert(d->full_name());
  for (int i = 0; i < d->nested_type_count(); ++i) collect(d->nested_type(i), messages, enums);
  for (int i = 0; i < d->enum_type_count(); ++i) enums.insert(d->enum_type(i)->full_name());
}

void collect(const FileDescriptor* file, std::set<std::string>& messages,
             std::set<std::string>& enums) {
  for (int i = 0; i < file->message_type_count(); ++i) collect(file->message_type(i), messages, enums);
  for (int i = 0; i < file->enum_type_count(); ++i) enums.insert(file->enum_type(i)->full_name());
}

}  // namespace

namespace {

// One message per schema file, named so that the linker keeps every file's descriptor.
std::set<std::string> linked_files() {
  namespace pb = apiary::pb;
  namespace ad = apiary::pb::autodist;
  const FileDescriptor* list[] = {
      pb::AccessToken::descriptor()->file(),    pb::NodeInfo::descriptor()->file(),
      pb::Tensor::descriptor()->file(),         pb::JoinRequest::descriptor()->file(),
      pb::TestRequest::descriptor()->file(),    pb::PublicKey::descriptor()->file(),
      ad::PSSynchronizer::descriptor()->file(), ad::Strategy::descriptor()->file(),
      ad::GraphItem::descriptor()->file(),
  };
  std::set<std::string> names;
  for (const FileDescriptor* f : list) names.insert(f->name());
  return names;
}

}  // namespace

TEST_CASE("every schema file has its upstream syntax and our package") {
  const auto linked = linked_files();
  REQUIRE(linked.size() == std::size(files));
  for (const FileRow& row : files) {
    INFO(row.file);
    CHECK(linked.count(row.file) == 1);
    const FileDescriptor* file = pool().FindFileByName(row.file);
    REQUIRE(file != nullptr);
    CHECK(FileDescriptor::SyntaxName(file->syntax()) == std::string(row.syntax));
    CHECK(file->package() == row.package);
  }
}

TEST_CASE("declared messages and enums match the table in both directions") {
  std::set<std::string> table_messages, table_enums;
  for (const TypeRow& row : types) {
    INFO(row.name);
    const FileDescriptor* file = pool().FindFileByName(row.file);
    REQUIRE(file != nullptr);
    if (std::string(row.kind) == "message") {
      const Descriptor* d = pool().FindMessageTypeByName(row.name);
      REQUIRE(d != nullptr);
      CHECK(d->file() == file);
      table_messages.insert(row.name);
    } else {
      const EnumDescriptor* e = pool().FindEnumTypeByName(row.name);
      REQUIRE(e != nullptr);
      CHECK(e->file() == file);
      table_enums.insert(row.name);
    }
  }
  std::set<std::string> messages, enums;
  for (const FileRow& row : files) collect(pool().FindFileByName(row.file), messages, enums);
  CHECK(messages == table_messages);
  CHECK(enums == table_enums);
}

TEST_CASE("every table field exists with its number, type and label") {
  for (const FieldRow& row : fields) {
    INFO(row.message << "." << row.field);
    const Descriptor* d = pool().FindMessageTypeByName(row.message);
    REQUIRE(d != nullptr);
    const FieldDescriptor* f = d->FindFieldByName(row.field);
    REQUIRE(f != nullptr);
    CHECK(f->number() == row.number);
    CHECK(type_of(f) == row.type);
    CHECK(label_of(f) == row.label);
  }
}

TEST_CASE("every declared field is in the table") {
  std::set<std::tuple<std::string, std::string, int>> table;
  for (const FieldRow& row : fields) table.emplace(row.message, row.field, row.number);
  std::set<std::string> messages, enums;
  for (const FileRow& row : files) collect(pool().FindFileByName(row.file), messages, enums);
  std::size_t declared = 0;
  for (const std::string& name : messages) {
    const Descriptor* d = pool().FindMessageTypeByName(name);
    REQUIRE(d != nullptr);
    for (int i = 0; i < d->field_count(); ++i) {
      const FieldDescriptor* f = d->field(i);
      INFO(name << "." << f->name() << " = " << f->number());
      CHECK(table.count({name, f->name(), f->number()}) == 1);
      ++declared;
    }
  }
  CHECK(declared == std::size(fields));
}

TEST_CASE("enum values match the table in both directions") {
  std::set<std::tuple<std::string, std::string, int>> table;
  for (const ValueRow& row : values) {
    INFO(row.enum_name << "." << row.value);
    const EnumDescriptor* e = pool().FindEnumTypeByName(row.enum_name);
    REQUIRE(e != nullptr);
    const auto* v = e->FindValueByName(row.value);
    REQUIRE(v != nullptr);
    CHECK(v->number() == row.number);
    table.emplace(row.enum_name, row.value, row.number);
  }
  for (const TypeRow& row : types) {
    if (std::string(row.kind) != "enum") continue;
    const EnumDescriptor* e = pool().FindEnumTypeByName(row.name);
    REQUIRE(e != nullptr);
    for (int i = 0; i < e->value_count(); ++i) {
      INFO(row.name << "." << e->value(i)->name());
      CHECK(table.count({row.name, e->value(i)->name(), e->value(i)->number()}) == 1);
    }
  }
}

TEST_CASE("wire bytes match hand-encoded upstream messages") {
  SECTION("libp2p Ed25519 public key: 08 01 12 20 <32 key bytes>") {
    apiary::pb::PublicKey key;
    key.set_key_type(apiary::pb::Ed25519);
    key.set_data(std::string(32, '\x07'));
    const std::string bytes = key.SerializeAsString();
    CHECK(bytes == std::string("\x08\x01\x12\x20", 4) + std::string(32, '\x07'));
  }
  SECTION("proto2 required fields: a key without data is not initialized") {
    apiary::pb::PublicKey key;
    key.set_key_type(apiary::pb::Ed25519);
    CHECK_FALSE(key.IsInitialized());
  }
  SECTION("Tensor with packed shape, default compression and chunks omitted") {
    apiary::pb::Tensor t;
    t.set_buffer(std::string("\x01\x02", 2));
    t.add_size(2);
    t.add_size(300);
    t.set_requires_grad(true);
    t.set_dtype("uint8");
    const std::string expected("\x0a\x02\x01\x02"          // buffer
                               "\x12\x03\x02\xac\x02"      // size, packed varints [2, 300]
                               "\x18\x01"                  // requires_grad
                               "\x22\x05uint8",            // dtype
                               18);
    CHECK(t.SerializeAsString() == expected);
  }
  SECTION("Strategy.Node's synchronizers are one oneof") {
    apiary::pb::autodist::Strategy::Node node;
    node.mutable_pssynchronizer()->set_staleness(3);
    CHECK(node.synchronizer_case() == apiary::pb::autodist::Strategy::Node::kPSSynchronizer);
    node.mutable_allreducesynchronizer()->set_group(1);
    CHECK(node.synchronizer_case() ==
          apiary::pb::autodist::Strategy::Node::kAllReduceSynchronizer);
    CHECK_FALSE(node.has_pssynchronizer());
  }
}
