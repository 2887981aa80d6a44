// The kernel profile's arithmetic, free of CUPTI: the activities a trace collected (kernels,
// copies, sets and synchronisations, in CUPTI's nanoseconds), the window of them a profile
// covers, the union of the device's busy intervals, the per-kernel sums and the JSON written.
// `cupti_trace.cpp` feeds it from CUPTI's activity buffers on the GPU machine;
// `tests/cupti_trace.rs` compiles it for the host under ASan/UBSan against constructed
// intervals whose answer is known.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace cupti_trace {

/// What an activity was on the device.
enum class Kind : uint8_t { Kernel, Memcpy, Memset, Sync };

/// One activity: [start, end) in nanoseconds; `name` indexes the kernel names (kernels only).
struct Activity {
  uint64_t start;
  uint64_t end;
  Kind kind;
  uint32_t name;
};

/// Which activities a profile covers. `all`: every one. `sync:A:B`: those launched between the
/// A-th and the B-th host synchronisation (stream or context, in time order), i.e. starting at or
/// after the end of the A-th and before the end of the B-th: work launched before a
/// synchronisation has started by the time it returns, work launched after it cannot start
/// before. A and B count from 1, or from the last when negative (-1: the last), and the A-th
/// must come before the B-th. The `train_step` one-shot of S steps synchronises after its
/// warm-up step, after its timed steps, and 4 S times after them (the forward and backward
/// passes and the update timed alone), so `sync:1:2` is exactly the timed steps, and so is
/// `sync:-(4S+2):-(4S+1)`, which a library's synchronisation before the warm-up cannot shift.
struct Window {
  bool by_sync = false;
  int32_t from = 0;
  int32_t to = 0;
};

/// Parses a window (`all`, or `sync:A:B` with A and B non-zero, A below B when both count from
/// the same end); false with the reason in `why` when it is neither.
bool parse_window(const std::string& text, Window* w, std::string* why);

/// Total nanoseconds covered by the union of the half-open intervals [first, second) (the device
/// busy on at least one of them); empty or reversed intervals cover nothing.
uint64_t union_ns(std::vector<std::pair<uint64_t, uint64_t>> intervals);

/// One kernel name's launches in the window.
struct KernelStats {
  uint32_t name;
  uint64_t count;
  uint64_t total_ns;
};

/// A window's profile.
struct Profile {
  /// The window asked for was found (with `all`, always; with `sync:A:B`, when the trace holds
  /// both synchronisations, the A-th before the B-th). When it was not, the profile covers every
  /// activity.
  bool window_found = true;
  /// Host synchronisations seen in the whole trace.
  uint64_t syncs = 0;
  /// From the first start to the last end of the window's activities, and the union of their
  /// intervals (kernels, copies, sets).
  uint64_t span_ns = 0;
  uint64_t busy_ns = 0;
  uint64_t kernel_count = 0, kernel_ns = 0;
  uint64_t memcpy_count = 0, memcpy_ns = 0;
  uint64_t memset_count = 0, memset_ns = 0;
  /// Activities without a valid interval (end before start, or no start), left out.
  uint64_t incomplete = 0;
  /// Per kernel name, by total time (longest first, then by name index).
  std::vector<KernelStats> kernels;
};

/// The profile of the activities in window `w`; `n_names` bounds the kernel name indices (a
/// kernel whose index is not below it counts as incomplete).
Profile aggregate(const std::vector<Activity>& acts, size_t n_names, const Window& w);

/// What the JSON says beyond the profile: the tool, the window as asked, the steps the window
/// holds (0: unknown) and the records CUPTI dropped.
struct Meta {
  std::string tool;
  std::string window;
  uint64_t steps = 0;
  uint64_t dropped = 0;
};

/// Appends `s` as a JSON string (quoted; `"`, `\` and control characters escaped; bytes of 0x80
/// and above passed through, as UTF-8 is).
void json_string(std::string* out, const std::string& s);

/// The profile as one JSON object (the shape `scripts/peer_common.py` writes for PyTorch):
/// tool, window, window_found, syncs, steps, span_ns, busy_ns, busy_share, the counts and
/// nanoseconds of kernels, copies and sets, incomplete, dropped, and `kernels`, a list of
/// {name, count, total_ns, mean_ns} in the profile's order.
std::string to_json(const Profile& p, const std::vector<std::string>& names, const Meta& meta);

}  // namespace cupti_trace
