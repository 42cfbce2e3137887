// The dump file (format in docs/flight_recorder.md) and the crash report's
// text lines. Writes are atomic: a temporary file renamed over the old one.
#pragma once
#include <string>

#include "record_buffer.h"

namespace titan::flight_recorder {

struct DumpInfo {
  int rank = 0;
  int world_size = 1;
  std::string trigger;  // watchdog, signal, terminate, exception, collective_failed, on_demand, exit
  std::string reason;   // one sentence for people
};

// Writes `folder`/rank_<rank>.json; returns its path. Throws std::exception on I/O errors.
std::string write_dump(const std::string& folder, const DumpInfo& info, const Snapshot& snapshot);

// "#812 all_gather seq 7 on 'dp_shard' [0,1,2,3] [[1024]] Float 4096 B started for 10.2 s at 'step 1 / ...'",
// "#813 recv seq 9 on 'pp' [0,1] from rank 0 tag 12 recv #3 [[2,32,64]] Float 16384 B started for 10.2 s at '...'"
std::string describe(const Record& record, double now_s);

}  // namespace titan::flight_recorder
