// messages/utf8.hpp: text made fit for a protobuf string field, within a byte limit.
#include <catch2/catch.hpp>

#include "envelope.pb.h"
#include "messages/utf8.hpp"

using apiary::messages::valid_utf8;

TEST_CASE("valid UTF-8 passes unchanged and is cut only between characters", "[utf8]") {
  const std::string text = "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x90\x9d";  // café € 🐝
  CHECK(valid_utf8(text) == text);
  CHECK(valid_utf8(text, 5) == "caf\xc3\xa9");
  CHECK(valid_utf8(text, 4) == "caf");  // not half of the é
  CHECK(valid_utf8(text, 8) == "caf\xc3\xa9 ");
  CHECK(valid_utf8(text, 9) == "caf\xc3\xa9 \xe2\x82\xac");
  CHECK(valid_utf8(text, 13) == "caf\xc3\xa9 \xe2\x82\xac ");
  CHECK(valid_utf8(text, 0).empty());
  CHECK(valid_utf8("").empty());
}

TEST_CASE("bytes that are not UTF-8 become question marks", "[utf8]") {
  CHECK(valid_utf8("a\xff" "b") == "a?b");
  CHECK(valid_utf8("\xc3") == "?");                       // a lead byte at the end
  CHECK(valid_utf8("\xc3(") == "?(");                     // a lead byte without its continuation
  CHECK(valid_utf8("\x80\xbf") == "??");                  // lone continuations
  CHECK(valid_utf8("\xc0\xaf") == "??");                  // overlong '/'
  CHECK(valid_utf8("\xe0\x80\xaf") == "???");             // overlong, three bytes
  CHECK(valid_utf8("\xed\xa0\x80") == "???");             // a surrogate
  CHECK(valid_utf8("\xf4\x90\x80\x80") == "????");        // past U+10FFFF
  CHECK(valid_utf8("\xf0\x9f\x90") == "???");             // a four-byte character cut short
  CHECK(valid_utf8(std::string("x\0y", 3)) == std::string("x\0y", 3));  // NUL is UTF-8
  CHECK(valid_utf8("\xff\xff\xff", 2) == "??");
}

TEST_CASE("every byte string made valid parses back from an envelope's string field", "[utf8]") {
  // protobuf refuses to parse a string field holding invalid UTF-8: what valid_utf8 makes
  // must always come back.
  std::string all;
  for (int i = 0; i < 256; ++i) {
    for (int j = 0; j < 256; j += 7) {
      all += static_cast<char>(i);
      all += static_cast<char>(j);
      all += static_cast<char>(0x80 + (i * 31 + j) % 64);
    }
  }
  for (std::size_t limit : {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{1023}, std::size_t{1024},
                            all.size()}) {
    for (std::size_t from = 0; from < 8; ++from) {
      apiary::pb::Envelope e;
      e.set_error_message(valid_utf8(std::string_view(all).substr(from), limit));
      CHECK(e.error_message().size() <= limit);
      apiary::pb::Envelope back;
      CHECK(back.ParseFromString(e.SerializeAsString()));
      CHECK(back.error_message() == e.error_message());
    }
  }
}
