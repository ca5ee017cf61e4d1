// The JSON and YAML-subset readers: structure, positions, and errors that point at the
// offending line and column.
#include <catch2/catch.hpp>

#include "core/strategy/json_reader.hpp"
#include "core/strategy/yaml_reader.hpp"

namespace {

using apiary::errc;
using namespace apiary::core::strategy;
using Catch::Matchers::Contains;

std::string json_error(const std::string& text) {
  auto d = parse_json(text, "f.json");
  REQUIRE_FALSE(d.ok());
  CHECK(d.error().code == errc::malformed);
  return d.error().message;
}

std::string yaml_error(const std::string& text) {
  auto d = parse_yaml(text, "f.yml");
  REQUIRE_FALSE(d.ok());
  CHECK(d.error().code == errc::malformed);
  return d.error().message;
}

}  // namespace

TEST_CASE("json: values, escapes and positions") {
  auto d = parse_json("{\"a\": [1, -2.5e3, true, null],\n \"b\": \"x\\u00e9\\ud83d\\ude00\\n\"}", "f.json");
  REQUIRE(d.ok());
  REQUIRE(d->kind == Document::Kind::map);
  const Document* a = d->find("a");
  REQUIRE(a != nullptr);
  REQUIRE(a->items.size() == 4);
  CHECK(a->items[0].text == "1");
  CHECK(a->items[1].text == "-2.5e3");
  CHECK_FALSE(a->items[1].quoted);
  CHECK(a->items[2].text == "true");
  CHECK(a->items[3].kind == Document::Kind::null);
  const Document* b = d->find("b");
  REQUIRE(b != nullptr);
  CHECK(b->quoted);
  CHECK(b->text == "x\xc3\xa9\xf0\x9f\x98\x80\n");
  CHECK(b->line == 2);
  CHECK(b->column == 7);
}

TEST_CASE("json: errors name the line and column") {
  CHECK_THAT(json_error("{\"a\": [1, 2,, 3]}"), Contains("f.json:1:13:"));
  CHECK_THAT(json_error("{\n  \"a\": 1,\n  \"a\": 2\n}"), Contains("f.json:3:3:") && Contains("\"a\" appears twice"));
  CHECK_THAT(json_error("{\"a\": 1} x"), Contains("the end of the file after the top-level value"));
  CHECK_THAT(json_error("{\"a\": \"abc"), Contains("closing"));
  CHECK_THAT(json_error("{\"a\": 01}"), Contains("',' or '}'"));
  CHECK_THAT(json_error("{\"a\": tru}"), Contains("a value"));
  CHECK_THAT(json_error(std::string(100, '[') + std::string(100, ']')), Contains("at most 64"));
  CHECK_THAT(json_error(""), Contains("f.json:1:1:"));
}

TEST_CASE("yaml: block maps and lists, flow collections, quotes and comments") {
  const std::string text =
      "# a comment\n"
      "nodes:\n"
      "  - address: 10.0.0.1   # trailing comment\n"
      "    gpus: [0, 1]\n"
      "    chief: true\n"
      "  - address: '10.0.0.2'\n"
      "    gpus:\n"
      "      - 3\n"
      "      - 2\n"
      "    env: {A: \"x # not a comment\", B: 'it''s'}\n"
      "empty:\n"
      "list_same_indent:\n"
      "- a\n"
      "- b\n";
  auto d = parse_yaml(text, "f.yml");
  INFO((d.ok() ? std::string() : d.error().what()));
  REQUIRE(d.ok());
  const Document* nodes = d->find("nodes");
  REQUIRE(nodes != nullptr);
  REQUIRE(nodes->items.size() == 2);
  const Document& n0 = nodes->items[0];
  CHECK(n0.find("address")->text == "10.0.0.1");
  CHECK(n0.find("address")->line == 3);
  CHECK(n0.find("address")->column == 14);
  CHECK(n0.find("gpus")->items.size() == 2);
  CHECK(n0.find("chief")->text == "true");
  const Document& n1 = nodes->items[1];
  CHECK(n1.find("address")->quoted);
  REQUIRE(n1.find("gpus")->items.size() == 2);
  CHECK(n1.find("gpus")->items[0].text == "3");
  CHECK(n1.find("env")->find("A")->text == "x # not a comment");
  CHECK(n1.find("env")->find("B")->text == "it's");
  CHECK(d->find("empty")->kind == Document::Kind::null);
  REQUIRE(d->find("list_same_indent")->items.size() == 2);
  CHECK(d->find("list_same_indent")->items[1].text == "b");
}

TEST_CASE("yaml: an empty file is a null document") {
  auto d = parse_yaml("# nothing\n\n", "f.yml");
  REQUIRE(d.ok());
  CHECK(d->kind == Document::Kind::null);
}

TEST_CASE("yaml: errors name the line and column") {
  CHECK_THAT(yaml_error("nodes:\n\t- a\n"), Contains("f.yml:2:1:") && Contains("tab"));
  CHECK_THAT(yaml_error("a: 1\n  b: 2\n"), Contains("f.yml:2:3:"));
  CHECK_THAT(yaml_error("a:\n    b: 1\n  c: 2\n"), Contains("f.yml:3:3:"));
  CHECK_THAT(yaml_error("a: 1\na: 2\n"), Contains("f.yml:2:1:") && Contains("\"a\" twice"));
  CHECK_THAT(yaml_error("a: [1, 2\n"), Contains("f.yml:1:") && Contains("same line"));
  CHECK_THAT(yaml_error("a: &x 1\n"), Contains("anchors"));
  CHECK_THAT(yaml_error("a: |\n  text\n"), Contains("block scalars"));
  CHECK_THAT(yaml_error("a: 'open\n"), Contains("closing '"));
  CHECK_THAT(yaml_error("just text\n"), Contains("\"key: value\""));
  CHECK_THAT(yaml_error("a: 1\n- b\n"), Contains("f.yml:2:1:"));
  CHECK_THAT(yaml_error("a: 1\n---\nb: 2\n"), Contains("single YAML document"));
}

TEST_CASE("document reader: typed values with field paths") {
  auto d = parse_yaml("n: 5\ns: '5'\nb: yes\nf: 2.5\nl: [1, x]\n", "f.yml");
  REQUIRE(d.ok());
  const DocumentReader r{"f.yml"};
  CHECK(*r.integer(*d->find("n"), "n", 0, 10) == 5);
  auto quoted = r.integer(*d->find("s"), "s", 0, 10);
  REQUIRE_FALSE(quoted.ok());
  CHECK_THAT(quoted.error().message, Contains("f.yml:2:4: s: expected an integer") && Contains("quoted"));
  CHECK_FALSE(r.integer(*d->find("n"), "n", 0, 4).ok());
  CHECK(*r.boolean(*d->find("b"), "b"));
  CHECK(*r.number(*d->find("f"), "f") == 2.5);
  auto list = r.integer_list(*d->find("l"), "l", 0, 10);
  REQUIRE_FALSE(list.ok());
  CHECK_THAT(list.error().message, Contains("l[1]"));
  auto keys = r.check_keys(*d, "root", {"n", "s", "b", "f"});
  REQUIRE_FALSE(keys.ok());
  CHECK_THAT(keys.error().message, Contains("unknown field \"l\""));
}
