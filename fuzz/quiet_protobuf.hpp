#pragma once
/// The fuzz targets' libFuzzer initializer (include it in a target's one source file):
/// protobuf logs every string field that is not UTF-8 and every text-format error, and
/// the fuzzer makes many; its log is silenced. The replay driver (tests/fuzz) calls it too.
#include <google/protobuf/stubs/logging.h>

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}
