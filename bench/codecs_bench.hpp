#pragma once
/// `apiary bench codecs`: encode and decode throughput of every tensor codec on randn
/// float32, one core, printed beside memcpy of the same bytes measured in the same run.
#include <cstddef>

namespace apiary::bench {

/// What `run_codecs_bench` measures.
struct CodecsBenchOptions {
  std::size_t mib = 64;    ///< size of the float32 input tensor, MiB
  std::size_t repeat = 3;  ///< timed runs per figure; the best is reported
  /// Time by this thread's CPU clock instead of the wall clock: steadier figures on a
  /// loaded machine (time spent descheduled is not counted), for memcpy and codecs alike.
  bool thread_cpu_clock = false;
};

/// Prints one row per codec: encode (into a reused message, and into a new one) and
/// decode GB/s (of float32 input bytes, 10^9 B/s),
/// the encode speed as a share of memcpy's, the message size, and the error (MSE); then
/// the goals (FLOAT16 and BLOCKWISE_8BIT encode >= 50% of memcpy, QUANTILE_8BIT encode
/// within 4x of UNIFORM_8BIT) as met or missed. Returns 0, or 1 if a codec failed.
int run_codecs_bench(const CodecsBenchOptions& options);

}  // namespace apiary::bench
